// Widening producer of the FP8-KV decode kernel (DecodeConfig kWiden; heuristics.WIDEN_FP8_KV):
// the cp.async producer's copies, then the FP8 -> FP16 conversion of each tile done by the
// producer threads, so that the consumer warps run the BF16 code path on FP16 operands.
//
// Why: with the conversion in the consumers, an FP8 tile costs each consumer warp 64 F2FP
// (FP8 -> FP16) instructions beside its 32 tensor-core products; the 8/1 FP8 kernel then streams
// at 0.83 us per tile against 0.63 us with the math skipped (NOTES.md, timeline), ~6 us of a
// 1x128K+31x4K call. Each sub-partition also holds one producer warp that mostly waits; doing
// the conversion there overlaps it with the consumer's softmax and products instead of adding
// to them.
//
// Pipeline per producer thread (128 threads; thread pid owns 16-byte chunk pid % 8 of rows
// pid / 8 + 16 i of K and of V, and Q chunks pid, pid + 128, ...):
//   issue tile n: cp.async its chunks into landing slot n % kLandStages, commit a group;
//   once kLandStages tiles are in flight: wait for the oldest group (cp.async.wait_group),
//   wait for that tile's FP16 stage to be free, convert the thread's own chunks (16 FP8 bytes
//   -> 32 FP16 bytes, exact), store them, and arrive on the stage's full barrier (128 arrivals,
//   release: the consumers' acquiring wait sees the stores).
// A thread reads back only the chunks it copied itself, so the landing ring needs no barrier:
// cp.async.wait_group makes a thread's own copies visible to it. Rows past the length are neither
// copied nor converted (the consumers mask them; the stage may hold stale values there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_bin_ring.cuh"
#include "hpc_attention/decode_params.h"
#include "hpc_attention/paged_decode_config.cuh"
#include "hpc_attention/paged_decode_producer.cuh"
#include "hpc_attention/sm90_primitives.cuh"

namespace hpc::attn {

// 16 E4M3 bytes -> 16 FP16 values (two 16-byte vectors, element order kept).
__device__ __forceinline__ void widen_e4m3x16(const uint4& w, uint4& lo, uint4& hi) {
  lo = make_uint4(e4m3x2_to_f16x2(w.x), e4m3x2_to_f16x2(w.x >> 16), e4m3x2_to_f16x2(w.y),
                  e4m3x2_to_f16x2(w.y >> 16));
  hi = make_uint4(e4m3x2_to_f16x2(w.z), e4m3x2_to_f16x2(w.z >> 16), e4m3x2_to_f16x2(w.w),
                  e4m3x2_to_f16x2(w.w >> 16));
}

// 8 BF16 -> 8 FP16, round to nearest (as the FP8-KV consumer rounds BF16 Q; needs |q| < 65504).
__device__ __forceinline__ uint4 bf16x8_to_f16x8(const uint4& w) {
  return make_uint4(pack2<true>(bf16_lo(w.x), bf16_hi(w.x)), pack2<true>(bf16_lo(w.y), bf16_hi(w.y)),
                    pack2<true>(bf16_lo(w.z), bf16_hi(w.z)), pack2<true>(bf16_lo(w.w), bf16_hi(w.w)));
}

// The thread's part of one landed tile: K and V chunks of its rows below `valid`, and when the
// tile carries the task's Q rows, its Q chunks; then one arrival on the stage's full barrier.
template <bool kFp8Q>
__device__ __forceinline__ void widen_tile(const PagedDecodeParams& p, const uint8_t* lb, uint8_t* sb, int valid,
                                           bool with_q, int pid, uint64_t* full_bar) {
  using Cfg = DecodeConfig<true, kFp8Q, false, true>;
  constexpr int kRowsPerPass = Cfg::kProducerThreads / 8;
  constexpr int kPasses = Cfg::kTile / kRowsPerPass;
  constexpr int kQInChunks = Cfg::kQInRowBytes / 16;
  const int row0 = pid >> 3, col = pid & 7;
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = row0 + i * kRowsPerPass;
    if (r < valid) {
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const uint4 w = *reinterpret_cast<const uint4*>(lb + kv * Cfg::kLandVOff + r * 128 + col * 16);
        uint4 lo, hi;
        widen_e4m3x16(w, lo, hi);
        uint8_t* dst = sb + (kv ? Cfg::kVOff : Cfg::kKOff) + r * Cfg::kRowPitch + col * 32;
        *reinterpret_cast<uint4*>(dst) = lo;
        *reinterpret_cast<uint4*>(dst + 16) = hi;
      }
    }
  }
  if (with_q) {
    for (int c = pid; c < p.group * kQInChunks; c += Cfg::kProducerThreads) {
      const int qr = c / kQInChunks, qc = c - qr * kQInChunks;
      const uint4 w = *reinterpret_cast<const uint4*>(lb + Cfg::kLandQOff + qr * Cfg::kQInRowBytes + qc * 16);
      uint8_t* dst = sb + Cfg::kQOff + qr * Cfg::kQPitch;
      if constexpr (kFp8Q) {
        uint4 lo, hi;
        widen_e4m3x16(w, lo, hi);
        *reinterpret_cast<uint4*>(dst + qc * 32) = lo;
        *reinterpret_cast<uint4*>(dst + qc * 32 + 16) = hi;
      } else {
        *reinterpret_cast<uint4*>(dst + qc * 16) = bf16x8_to_f16x8(w);
      }
    }
  }
  mbar_arrive(full_bar);
}

template <bool kFp8Q>
__device__ __forceinline__ void producer_warps_widen(const PagedDecodeParams& p, uint8_t* smem, uint64_t* full,
                                                     uint64_t* empty, int t_begin, int t_end, int4 first,
                                                     int first_page) {
  using Cfg = DecodeConfig<true, kFp8Q, false, true>;
  constexpr int kL = Cfg::kLandStages;
  constexpr int kRowsPerPass = Cfg::kProducerThreads / 8;  // 8 chunks of 16 FP8 bytes per row
  constexpr int kPasses = Cfg::kTile / kRowsPerPass;
  constexpr int kQInChunks = Cfg::kQInRowBytes / 16;
  constexpr int kQElem = kFp8Q ? 1 : 2;
  static_assert(kL == 3, "the in-flight bookkeeping below packs 3 slots");
  const int pid = threadIdx.x - 32 * Cfg::kConsumerWarps;  // 0..127
  const int row0 = pid >> 3, col = pid & 7;
  // No L2 policy on these copies: see cp_async_16_nohint (the other producers stream KV with
  // evict_first).
  const int page_mask = (1 << p.page_size_log2) - 1;
  const char* kbase = static_cast<const char*>(p.k_cache) + col * 16;
  const char* vbase = static_cast<const char*>(p.v_cache) + col * 16;
  uint8_t* land = smem + Cfg::kLandOff;
  // Tiles issued but not converted: landing slots [done, done + inflight) mod kL; per slot its
  // valid row count (bits 0-6) and whether it carries Q (bit 7), one byte per slot.
  int issue_slot = 0, done_slot = 0, inflight = 0;
  uint32_t slot_info = 0;
  int stage = 0;
  uint32_t phase = 0;
  auto convert_oldest = [&]() {
    const uint32_t info = (slot_info >> (8 * done_slot)) & 0xFFu;
    mbar_wait(&empty[stage], phase ^ 1);
    widen_tile<kFp8Q>(p, land + done_slot * Cfg::kLandBytes, smem + stage * Cfg::kStageBytes,
                      static_cast<int>(info & 0x7Fu), (info & 0x80u) != 0, pid, &full[stage]);
    if (++stage == Cfg::kStages) {
      stage = 0;
      phase ^= 1;
    }
    done_slot = done_slot + 1 == kL ? 0 : done_slot + 1;
    --inflight;
  };
  // Own bin, then the tail bins in a fixed order (decode_bin_ring.cuh: StaticBins).
  StaticBins bins{static_cast<int>(blockIdx.x), p.counters[kNumTailBins], 0, 0, make_int4(0, 0, 0, 0)};
  for (;;) {
  bins.prefetch(p);
  int4 next = first;  // the bin's first task (prologue or previous bin)
  for (int t = t_begin; t < t_end; ++t) {
    const int4 task = next;
    if (t + 1 < t_end) next = p.tasks[t + 1];  // in flight while this task streams
    const int b = task.x / p.num_kv_heads, h = task.x - b * p.num_kv_heads;
    const int32_t* pt = p.page_table + b * p.page_table_stride;
    const int tile_end = (task.z + Cfg::kTile - 1) / Cfg::kTile;
    for (int tile = task.y; tile < tile_end; ++tile) {
      const int valid = min(Cfg::kTile, task.z - tile * Cfg::kTile);
      int pg[kPasses];  // page ids of this thread's rows, clamped: a bad table never faults
      if (first_page >= 0) {  // the own bin's first tile, one page (>= 64 tokens): id from the plan
#pragma unroll
        for (int i = 0; i < kPasses; ++i) pg[i] = first_page >= p.num_pages ? p.num_pages - 1 : first_page;
        first_page = -1;
      } else {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int r = row0 + i * kRowsPerPass;
          const int id = r < valid ? __ldg(pt + ((tile * Cfg::kTile + r) >> p.page_size_log2)) : 0;
          pg[i] = id < 0 ? 0 : (id >= p.num_pages ? p.num_pages - 1 : id);
        }
      }
      uint8_t* lb = land + issue_slot * Cfg::kLandBytes;  // converted by this thread before (see below)
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int r = row0 + i * kRowsPerPass;
        if (r < valid) {
          const long long in_page = (tile * Cfg::kTile + r) & page_mask;
          const long long koff = pg[i] * p.k_stride_page + in_page * p.k_stride_tok + h * p.k_stride_head;
          const long long voff = pg[i] * p.v_stride_page + in_page * p.v_stride_tok + h * p.v_stride_head;
          cp_async_16_nohint(lb + r * 128 + col * 16, kbase + koff);
          cp_async_16_nohint(lb + Cfg::kLandVOff + r * 128 + col * 16, vbase + voff);
        }
      }
      const bool with_q = tile == task.y;
      if (with_q) {
        const char* q = static_cast<const char*>(p.q) + (b * p.q_stride_b + h * p.group * p.q_stride_h) * kQElem;
        for (int c = pid; c < p.group * kQInChunks; c += Cfg::kProducerThreads) {
          const int qr = c / kQInChunks, qc = c - qr * kQInChunks;
          cp_async_16_nohint(lb + Cfg::kLandQOff + qr * Cfg::kQInRowBytes + qc * 16,
                             q + qr * p.q_stride_h * kQElem + qc * 16);
        }
      }
      cp_async_commit();
      slot_info = (slot_info & ~(0xFFu << (8 * issue_slot))) |
                  ((static_cast<uint32_t>(valid) | (with_q ? 0x80u : 0u)) << (8 * issue_slot));
      issue_slot = issue_slot + 1 == kL ? 0 : issue_slot + 1;
      // The ring is full: the oldest tile has landed once at most kL - 1 groups are pending.
      // Converting it now also frees the slot the next issue writes.
      if (++inflight == kL) {
        cp_async_wait<kL - 1>();
        convert_oldest();
      }
    }
  }
  if (!bins.next(t_begin, t_end, first)) break;
  }
  cp_async_wait<0>();
  while (inflight > 0) convert_oldest();
  if (p.merge) write_empty_items<Cfg::kProducerThreads>(p, pid);
}

}  // namespace hpc::attn
