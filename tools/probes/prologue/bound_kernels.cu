// What any kernel in the fused prologue's place costs: a bare copy of exactly the prologue's bytes, and an
// empty kernel. tools/probes/prologue/prologue_bound.py builds this file with bindings.cpp into an extension
// (hpc_common.jit, -DHPC_PROBE_EXTENSION) and times both under the two methods of hpc_common.bench.timing.
//
// The copy numbers rows as the prologue does (a team of 16 lanes per 128-value (token, head) row, 256-thread
// blocks, R consecutive rows per team, token-major) and keeps the prologue's two dependent loads: the row of
// qkv with the token's position and slot, then the cos / sin row at that position (FP32, rotary_dim values).
// Every row is read once and written once where the prologue writes it (Q row, FP8 Q's scale, the K / V row at
// the slot), with no arithmetic: the bytes are the qkv bytes (FP8: their first half), the cos / sin words are
// folded in under a mask that is zero at run time (so the loads stay). R = 1, 2, 4, 8 and all of a team's loads
// (ids and qkv, then one cos / sin row per row) issued before any store: the rows-per-team sweep says what more
// bytes in flight and fewer, fuller waves are worth without the prologue's math.
#include <cuda_runtime.h>

#include <cstdio>

#include "hpc_attention/prologue.cuh"  // PrologueParams, the team geometry, cache_offset, load_index
#include "hpc_common/pdl.cuh"

namespace probe {

using hpc::attn::kPrologueHeadDim;
using hpc::attn::kPrologueTeam;
using hpc::attn::kPrologueThreads;
using hpc::attn::PrologueParams;
constexpr int kVec = kPrologueHeadDim / kPrologueTeam;

__device__ __forceinline__ void store16(void* p, const uint4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

template <int R, bool kFp8>
__global__ void __launch_bounds__(kPrologueThreads, 2) bare_copy_kernel(const __grid_constant__ PrologueParams p,
                                                                        unsigned mix) {
  using namespace hpc::attn::prologue;
  constexpr int kTeams = kPrologueThreads / kPrologueTeam;
  const int team = threadIdx.x / kPrologueTeam, l = threadIdx.x % kPrologueTeam;
  const int Hq = p.num_qo_heads, Hkv = p.num_kv_heads, heads = Hq + 2 * Hkv;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  long long t[R], slot[R], pos[R];
  int h[R], kind[R];
  uint4 raw[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long unit = (static_cast<long long>(blockIdx.x) * kTeams + team) * R + r;
    t[r] = unit / heads;
    h[r] = static_cast<int>(unit - t[r] * heads);
    kind[r] = t[r] >= p.num_tokens ? -1 : (h[r] < Hq ? 0 : (h[r] < Hq + Hkv ? 1 : 2));
    slot[r] = pos[r] = 0;
    if (kind[r] >= 0) {
      raw[r] = __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.qkv) +
                                                    t[r] * p.qkv_stride_t + h[r] * kPrologueHeadDim + l * kVec));
      if (kind[r] > 0) slot[r] = load_index(p.slot_mapping, t[r], p.slots_i64);
      if (kind[r] < 2) pos[r] = load_index(p.positions, t[r], p.positions_i64);
    }
  }
  // The cos / sin row of each q / k row (a token's row is read by each of its heads, as in the prologue; the
  // repeats hit L1): lane l reads floats 4 l .. 4 l + 3 of the cos half and of the sin half.
  unsigned fold[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    fold[r] = 0;
    const int half = p.rotary_dim / 2;
    if (kind[r] >= 0 && kind[r] < 2 && 4 * l < half) {
      const float* row = static_cast<const float*>(p.cos_sin) + pos[r] * p.cos_sin_stride;
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(row + 4 * l));
      const uint4 b = __ldg(reinterpret_cast<const uint4*>(row + half + 4 * l));
      fold[r] = (a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w) & mix;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (kind[r] < 0) continue;
    const uint4 v = make_uint4(raw[r].x ^ fold[r], raw[r].y, raw[r].z, raw[r].w);
    long long at;
    void* base;
    if (kind[r] == 0) {
      at = t[r] * p.q_stride_t + h[r] * p.q_stride_h + l * kVec;
      base = p.q_out;
      if (kFp8 && l == 0) p.q_scale[t[r] * p.q_scale_stride_t + h[r] * p.q_scale_stride_h] = __uint_as_float(v.x);
    } else {
      if (slot[r] < 0 || slot[r] >= p.num_slots) continue;
      const bool k = kind[r] == 1;
      at = cache_offset(slot[r], p.page_size, k ? p.k_stride_page : p.v_stride_page,
                        k ? p.k_stride_tok : p.v_stride_tok, k ? p.k_stride_head : p.v_stride_head,
                        h[r] - Hq - (k ? 0 : Hkv)) + l * kVec;
      base = k ? p.k_cache : p.v_cache;
    }
    if constexpr (kFp8) {
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(base) + at) = make_uint2(v.x, v.y);
    } else {
      store16(static_cast<__nv_bfloat16*>(base) + at, v);
    }
  }
}

// Reads no parameter before the PDL wait, as the library's kernels; `never` keeps the parameter.
__global__ void empty_kernel(int* never) {
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();
  if (never != nullptr && threadIdx.x == 1023) *never = 1;
}

template <int R, bool kFp8>
cudaError_t launch_copy(const PrologueParams& p, unsigned mix, cudaStream_t stream, bool pdl) {
  const long long units = p.num_tokens * (p.num_qo_heads + 2 * p.num_kv_heads);
  const long long rows_per_block = (kPrologueThreads / kPrologueTeam) * R;
  const long long blocks = (units + rows_per_block - 1) / rows_per_block;
  if (blocks <= 0 || blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  return hpc::launch_kernel(bare_copy_kernel<R, kFp8>, dim3(static_cast<unsigned>(blocks)), dim3(kPrologueThreads),
                            0, stream, pdl, p, mix);
}

cudaError_t run_bare_copy(const PrologueParams& p, int rows_per_team, bool fp8, unsigned mix, cudaStream_t stream,
                          bool pdl) {
  switch (rows_per_team * 2 + (fp8 ? 1 : 0)) {
    case 2: return launch_copy<1, false>(p, mix, stream, pdl);
    case 3: return launch_copy<1, true>(p, mix, stream, pdl);
    case 4: return launch_copy<2, false>(p, mix, stream, pdl);
    case 5: return launch_copy<2, true>(p, mix, stream, pdl);
    case 8: return launch_copy<4, false>(p, mix, stream, pdl);
    case 9: return launch_copy<4, true>(p, mix, stream, pdl);
    case 16: return launch_copy<8, false>(p, mix, stream, pdl);
    case 17: return launch_copy<8, true>(p, mix, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

// Registers per thread of the copy kernel (they set how many CTAs of it an SM holds), -1 for an unknown variant.
int bare_copy_registers(int rows_per_team, bool fp8) {
  cudaFuncAttributes a{};
  cudaError_t e = cudaErrorInvalidValue;
  switch (rows_per_team * 2 + (fp8 ? 1 : 0)) {
    case 2: e = cudaFuncGetAttributes(&a, bare_copy_kernel<1, false>); break;
    case 3: e = cudaFuncGetAttributes(&a, bare_copy_kernel<1, true>); break;
    case 4: e = cudaFuncGetAttributes(&a, bare_copy_kernel<2, false>); break;
    case 5: e = cudaFuncGetAttributes(&a, bare_copy_kernel<2, true>); break;
    case 8: e = cudaFuncGetAttributes(&a, bare_copy_kernel<4, false>); break;
    case 9: e = cudaFuncGetAttributes(&a, bare_copy_kernel<4, true>); break;
    case 16: e = cudaFuncGetAttributes(&a, bare_copy_kernel<8, false>); break;
    case 17: e = cudaFuncGetAttributes(&a, bare_copy_kernel<8, true>); break;
    default: break;
  }
  return e == cudaSuccess ? a.numRegs : -1;
}

cudaError_t run_empty(int blocks, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(empty_kernel, dim3(blocks), dim3(kPrologueThreads), 0, stream, pdl,
                            static_cast<int*>(nullptr));
}

}  // namespace probe

#ifndef HPC_PROBE_EXTENSION
// tools/probes/build.py compiles every probe as a program (CI checks it builds against the real headers);
// the measurement itself needs torch and runs from prologue_bound.py.
int main() {
  std::puts("run tools/probes/prologue/prologue_bound.py (it builds this file as an extension)");
  return 0;
}
#endif
