// Producer warps of the decode kernel: stream K/V tiles (and each task's Q rows) into
// the shared-memory ring with 16-byte cp.async copies (see decode.cuh for the scheme).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_bin_ring.cuh"
#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_config.cuh"
#include "hpc_attention/sm90_primitives.cuh"

namespace hpc::attn {

// Merge mode has no combine kernel: empty items (combine entries with 0 parts) get their zero
// rows from the producer threads (kThreads of them, index tid), entries strided over the CTAs,
// off the critical path (after the cp.async loads are issued, or on the TMA producer's idle warps).
template <int kThreads>
__device__ __forceinline__ void write_empty_items(const DecodeParams& p, int tid) {
  const int n_comb = p.counters[kNumCombine];
  for (int e = blockIdx.x; e < n_comb; e += gridDim.x) {
    const int4 ent = p.combine[e];
    if (ent.z != 0) continue;
    const int b = ent.x / p.num_kv_heads, h = ent.x - b * p.num_kv_heads;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + b * p.out_stride_b + h * p.group * p.out_stride_h;
    for (int c = tid; c < p.group * 16; c += kThreads) {
      *reinterpret_cast<uint4*>(out + (c >> 4) * p.out_stride_h + 8 * (c & 15)) = make_uint4(0, 0, 0, 0);
    }
  }
}

template <bool kFp8Kv, bool kFp8Q>
__device__ __forceinline__ void producer_warps(const DecodeParams& p, uint8_t* smem, uint64_t* full,
                                               uint64_t* empty, int bin, int t_begin, int t_end, int4 first,
                                               int first_page) {
  using Cfg = DecodeConfig<kFp8Kv, kFp8Q>;
  constexpr int kChunks = Cfg::kRowBytes / 16;                  // 16-byte chunks per row
  constexpr int kRowsPerPass = Cfg::kProducerThreads / kChunks;  // rows covered per pass
  constexpr int kPasses = Cfg::kTile / kRowsPerPass;
  constexpr int kQChunks = Cfg::kQRowBytes / 16;
  constexpr int kElem = kFp8Kv ? 1 : 2;
  constexpr int kQElem = kFp8Q ? 1 : 2;
  const int pid = threadIdx.x - 32 * Cfg::kConsumerWarps;  // 0..127
  const int row0 = pid / kChunks, col = pid % kChunks;
  const uint64_t policy = kv_l2_evict_first();
  const int page_mask = (1 << p.page_size_log2) - 1;
  const char* kbase = static_cast<const char*>(p.k_cache) + col * 16;
  const char* vbase = static_cast<const char*>(p.v_cache) + col * 16;
  int stage = 0;
  uint32_t phase = 0;
  // Own bin, then the tail bins in a fixed order (decode_bin_ring.cuh: StaticBins).
  StaticBins bins{bin, p.counters[kNumTailBins], 0, 0, make_int4(0, 0, 0, 0)};
  for (;;) {
  bins.prefetch(p);
  int4 next = first;  // the bin's first task (prologue or previous bin)
  for (int t = t_begin; t < t_end; ++t) {
    const int4 task = next;
    // t is the position in the bin's run order (task_in_run)
    if (t + 1 < t_end) next = task_in_run(p, t_begin, t_end, t + 1);  // in flight while this task streams
    const int b = task.x / p.num_kv_heads, h = task.x - b * p.num_kv_heads;
    const int32_t* pt = p.page_table + b * p.page_table_stride;
    const int tile_end = (task.z + Cfg::kTile - 1) / Cfg::kTile;
    for (int tile = task.y; tile < tile_end; ++tile) {
      const int valid = min(Cfg::kTile, task.z - tile * Cfg::kTile);
      // Page ids of this thread's rows, loaded before the wait for a free stage so that their
      // latency hides behind it. Ids are clamped into range: a bad table never faults.
      int pg[kPasses];
      if (first_page >= 0) {  // the own bin's first tile, one page (>= 64 tokens): id from the plan
#pragma unroll
        for (int i = 0; i < kPasses; ++i) pg[i] = first_page >= p.num_pages ? p.num_pages - 1 : first_page;
        first_page = -1;
      } else {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int r = row0 + i * kRowsPerPass;
          int id = r < valid ? __ldg(pt + ((tile * Cfg::kTile + r) >> p.page_size_log2)) : 0;
          pg[i] = id < 0 ? 0 : (id >= p.num_pages ? p.num_pages - 1 : id);
        }
      }
      mbar_wait(&empty[stage], phase ^ 1);
      uint8_t* sb = smem + stage * Cfg::kStageBytes;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int r = row0 + i * kRowsPerPass;
        if (r < valid) {
          const long long in_page = (tile * Cfg::kTile + r) & page_mask;
          const long long koff = pg[i] * p.k_stride_page + in_page * p.k_stride_tok + h * p.k_stride_head;
          const long long voff = pg[i] * p.v_stride_page + in_page * p.v_stride_tok + h * p.v_stride_head;
          cp_async_16(sb + Cfg::kKOff + r * Cfg::kRowPitch + col * 16, kbase + koff * kElem, policy);
          cp_async_16(sb + Cfg::kVOff + r * Cfg::kRowPitch + col * 16, vbase + voff * kElem, policy);
        }
      }
      if (tile == task.y) {
        const char* q = static_cast<const char*>(p.q) + (b * p.q_stride_b + h * p.group * p.q_stride_h) * kQElem;
        for (int c = pid; c < p.group * kQChunks; c += Cfg::kProducerThreads) {
          const int qr = c / kQChunks, qc = c - qr * kQChunks;
          cp_async_16(sb + Cfg::kQOff + qr * Cfg::kQPitch + qc * 16, q + qr * p.q_stride_h * kQElem + qc * 16,
                      policy);
        }
      }
      cp_async_arrive_noinc(&full[stage]);
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
  if (!bins.next(t_begin, t_end, first)) break;
  }
  if (p.merge) write_empty_items<Cfg::kProducerThreads>(p, pid);
}

}  // namespace hpc::attn
