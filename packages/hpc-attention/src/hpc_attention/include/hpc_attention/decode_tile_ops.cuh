// Per-tile operand loads and products of the decode consumers (decode.cuh): the
// query fragments, the K / V chunk addressing of both stage layouts, the scores S = Q K^T (or
// S^T = K Q^T) of a tile and the B fragments of O += P V. Each works on one warp's 16 tokens of a
// 64-token tile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_config.cuh"
#include "hpc_attention/sm90_primitives.cuh"

namespace hpc::attn {

// Query fragments (A operand, 16 rows x 128) for the 8 k-steps, from the stage's Q rows.
// BF16 KV: BF16 operands in the standard layout. FP8 KV: FP16 operands with the head dim
// permuted inside each k16 step (physical 4j..4j+3 -> logical 2j, 2j+1, 2j+8, 2j+9) to match
// the K fragments read as 4 consecutive FP8 bytes.
template <bool kFp8Kv, bool kFp8Q>
__device__ __forceinline__ void load_q_frags(const uint8_t* qs, uint32_t (&qa)[8][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, j = lane & 3;
  if constexpr (!kFp8Kv && !kFp8Q) {
    const uint32_t base = smem_u32(qs) + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 272 + 16 * (lane >> 4);
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) ldsm_x4(base + ks * 32, qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
  } else {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // rows g and g + 8
        const uint8_t* row = qs + (g + 8 * half) * 272;
        uint32_t lo, hi;  // lo -> regs 0/1 (cols 2j, 2j+1), hi -> regs 2/3 (cols 2j+8, 2j+9)
        if constexpr (kFp8Kv && kFp8Q) {
          e4m3x4_to_f16x2x2(*reinterpret_cast<const uint32_t*>(row + 16 * ks + 4 * j), lo, hi);
        } else if constexpr (kFp8Kv) {  // BF16 Q -> FP16, permuted
          const uint2 w = *reinterpret_cast<const uint2*>(row + 2 * (16 * ks + 4 * j));
          lo = pack2<true>(bf16_lo(w.x), bf16_hi(w.x));
          hi = pack2<true>(bf16_lo(w.y), bf16_hi(w.y));
        } else {  // FP8 Q with BF16 KV: standard layout, E4M3 -> FP16 -> FP32 -> BF16 (exact)
          const uint16_t a = *reinterpret_cast<const uint16_t*>(row + 16 * ks + 2 * j);
          const uint16_t c = *reinterpret_cast<const uint16_t*>(row + 16 * ks + 8 + 2 * j);
          const float2 fa = f16x2_to_float2(e4m3x2_to_f16x2(a));
          const float2 fc = f16x2_to_float2(e4m3x2_to_f16x2(c));
          lo = pack2<false>(fa.x, fa.y);
          hi = pack2<false>(fc.x, fc.y);
        }
        qa[ks][half] = lo;
        qa[ks][2 + half] = hi;
      }
    }
  }
}

// Byte offset inside a K / V tile row of the 16-byte chunk 2 * step + b (b = 0 or 1; step a
// compile-time loop index) for a row with r & 7 == x. Padded layout: the plain offset. TMA
// layout: 64-dim half (step >> 2) of the tile, then the chunk XOR-swizzled by the row (the
// pattern the 128-byte-swizzle copies wrote); `(2 * (step & 3)) ^ (b ^ x)` costs one LOP per step.
template <typename Cfg>
__device__ __forceinline__ uint32_t kv_chunk(int step, uint32_t b, uint32_t x) {
  if constexpr (Cfg::kSwizzled) {
    return (step >> 2) * Cfg::kHalfBytes + (((2u * (step & 3)) ^ (b ^ x)) << 4);
  } else {
    return 32u * step + 16u * b;
  }
}

// S = Q K^T for this warp's 16 tokens of the tile in stage `sb` (2 n-tiles of 8), FP32.
//
// kHeadsN (G <= 8; consumer_warp's kHeadsN): S^T = K Q^T instead, the tokens on the mma's M side
// (16 rows, all real) and the query heads on N (8 columns), where S = Q K^T pads the G <= 8 heads
// to 16 rows: 8 mma instead of 16 per tile and warp, and no softmax work on padded rows. The K
// loads and FP8 conversions are the same: the ldmatrix fragment of token g (bytes 4j..4j+3 of a
// chunk) is the A fragment of rows g / g + 8 as it is the B fragment of column g; Q's B fragment
// (column = head g) is load_q_frags' row g (registers 0 and 2). C fragment: s[.][0] (token g,
// head 2j), [1] (token g, head 2j + 1), [2] / [3] the same for token g + 8; s[0] and s[1] are the
// partial sums of the even and odd k-steps (two 4-deep mma chains instead of one 8-deep chain),
// added by the caller.
template <typename Cfg, bool kFp8Kv, bool kHeadsN>
__device__ __forceinline__ void tile_scores(const uint8_t* sb, const uint32_t (&qa)[8][4], float (&s)[2][4]) {
  constexpr bool kF16 = kFp8Kv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  // ldmatrix rows: lane -> token 16 * warp + (lane & 7) + 8 * (lane >> 4), 16-byte chunk
  // 2 * step + ((lane >> 3) & 1) of the row (swizzled layout: see kv_chunk).
  const uint32_t kaddr = smem_u32(sb + Cfg::kKOff) + (16 * warp + (lane & 7) + 8 * (lane >> 4)) * Cfg::kRowPitch;
  const uint32_t kb = (lane >> 3) & 1;
  if constexpr (!kFp8Kv) {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      uint32_t r0, r1, r2, r3;  // token g / g + 8 (r0, r2: dims 16 ks + 0..7; r1, r3: + 8..15)
      ldsm_x4(kaddr + kv_chunk<Cfg>(ks, kb, lane & 7), r0, r1, r2, r3);
      if constexpr (kHeadsN) {
        const uint32_t a[4] = {r0, r2, r1, r3};
        mma_16816<kF16>(s[ks & 1], a, qa[ks][0], qa[ks][2]);
      } else {
        mma_16816<kF16>(s[0], qa[ks], r0, r1);
        mma_16816<kF16>(s[1], qa[ks], r2, r3);
      }
    }
  } else {
#pragma unroll
    for (int s32 = 0; s32 < 4; ++s32) {  // 32 FP8 bytes = 2 k-steps per ldmatrix
      uint32_t r0, r1, r2, r3;  // token g / g + 8 (r0, r2: k-step 2 s32; r1, r3: 2 s32 + 1)
      ldsm_x4(kaddr + kv_chunk<Cfg>(s32, kb, lane & 7), r0, r1, r2, r3);
      uint32_t b[4][2];
      e4m3x4_to_f16x2x2(r0, b[0][0], b[0][1]);
      e4m3x4_to_f16x2x2(r1, b[1][0], b[1][1]);
      e4m3x4_to_f16x2x2(r2, b[2][0], b[2][1]);
      e4m3x4_to_f16x2x2(r3, b[3][0], b[3][1]);
      if constexpr (kHeadsN) {  // A fragments: {row g, row g + 8} x {k 2j.., k 2j + 8..}
        const uint32_t a0[4] = {b[0][0], b[2][0], b[0][1], b[2][1]};
        const uint32_t a1[4] = {b[1][0], b[3][0], b[1][1], b[3][1]};
        mma_16816<kF16>(s[0], a0, qa[2 * s32][0], qa[2 * s32][2]);
        mma_16816<kF16>(s[1], a1, qa[2 * s32 + 1][0], qa[2 * s32 + 1][2]);
      } else {
        mma_16816<kF16>(s[0], qa[2 * s32], b[0][0], b[0][1]);
        mma_16816<kF16>(s[0], qa[2 * s32 + 1], b[1][0], b[1][1]);
        mma_16816<kF16>(s[1], qa[2 * s32], b[2][0], b[2][1]);
        mma_16816<kF16>(s[1], qa[2 * s32 + 1], b[3][0], b[3][1]);
      }
    }
  }
}

// B fragments of O += P V for this warp's 16 tokens of the tile in stage `sb`: n-tile nt's two
// registers in vf[nt] (FP16 / BF16 pairs), rows at or past `valid` masked to zero (stale shared
// memory may hold NaN). FP8 V is converted here (exact), in the layout of out_col<true>.
// kFull: every token of the tile is valid (a task's tiles but its last), no masks: 32 AND
// instructions per tile and warp fewer (ncu: 34 LOP3 per tile in the 8/1 loops before).
template <typename Cfg, bool kFp8Kv, bool kFull>
__device__ __forceinline__ void tile_v_frags(const uint8_t* sb, int valid, uint32_t (&vf)[16][2]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, j = lane & 3;
  const int tok_base = 16 * warp + 2 * j;
  const uint32_t mlo =
      kFull ? 0xFFFFFFFFu : (tok_base < valid ? 0x0000FFFFu : 0u) | (tok_base + 1 < valid ? 0xFFFF0000u : 0u);
  const uint32_t mhi =
      kFull ? 0xFFFFFFFFu : (tok_base + 8 < valid ? 0x0000FFFFu : 0u) | (tok_base + 9 < valid ? 0xFFFF0000u : 0u);
  if constexpr (!kFp8Kv) {
    const uint32_t vaddr =
        smem_u32(sb + Cfg::kVOff) + (16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1)) * Cfg::kRowPitch;
#pragma unroll
    for (int pp = 0; pp < 8; ++pp) {
      uint32_t r0, r1, r2, r3;
      ldsm_x4_trans(vaddr + kv_chunk<Cfg>(pp, lane >> 4, lane & 7), r0, r1, r2, r3);
      vf[2 * pp][0] = r0 & mlo;
      vf[2 * pp][1] = r1 & mhi;
      vf[2 * pp + 1][0] = r2 & mlo;
      vf[2 * pp + 1][1] = r3 & mhi;
    }
  } else {
    // Rows 16 * warp + 2j (+1, +8, +9), bytes 32u + 4g: chunk 2u + (g >> 2), offset 4 (g & 3).
    // Rows 2j and 2j + 8 share r & 7 (= 2j), rows 2j + 1 and 2j + 9 too (= 2j + 1).
    const uint8_t* vrow = sb + Cfg::kVOff + (16 * warp + 2 * j) * Cfg::kRowPitch + 4 * (g & 3);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t c0 = kv_chunk<Cfg>(u, g >> 2, 2 * j), c1 = kv_chunk<Cfg>(u, g >> 2, 2 * j + 1);
      const uint32_t w0 = *reinterpret_cast<const uint32_t*>(vrow + c0);
      const uint32_t w1 = *reinterpret_cast<const uint32_t*>(vrow + Cfg::kRowPitch + c1);
      const uint32_t w2 = *reinterpret_cast<const uint32_t*>(vrow + 8 * Cfg::kRowPitch + c0);
      const uint32_t w3 = *reinterpret_cast<const uint32_t*>(vrow + 9 * Cfg::kRowPitch + c1);
      const uint32_t a01 = __byte_perm(w0, w1, 0x5140), a23 = __byte_perm(w0, w1, 0x7362);
      const uint32_t c01 = __byte_perm(w2, w3, 0x5140), c23 = __byte_perm(w2, w3, 0x7362);
      uint32_t a0, a1, a2, a3, c0v, c1v, c2v, c3v;
      e4m3x4_to_f16x2x2(a01, a0, a1);
      e4m3x4_to_f16x2x2(c01, c0v, c1v);
      e4m3x4_to_f16x2x2(a23, a2, a3);
      e4m3x4_to_f16x2x2(c23, c2v, c3v);
      vf[4 * u + 0][0] = a0 & mlo;
      vf[4 * u + 0][1] = c0v & mhi;
      vf[4 * u + 1][0] = a1 & mlo;
      vf[4 * u + 1][1] = c1v & mhi;
      vf[4 * u + 2][0] = a2 & mlo;
      vf[4 * u + 2][1] = c2v & mhi;
      vf[4 * u + 3][0] = a3 & mlo;
      vf[4 * u + 3][1] = c3v & mhi;
    }
  }
}

}  // namespace hpc::attn
