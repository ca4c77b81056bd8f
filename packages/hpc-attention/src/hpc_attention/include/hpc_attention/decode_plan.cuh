// Decode planner: builds the task map of the persistent decode kernel on the device, from the
// device-side KV lengths, so a step needs no host sync and replays under a CUDA graph.
//
// Work unit: an item = (request b, KV head h), item = b * Hkv + h, cut into 64-token tiles.
// Dynamic mode: the items' tiles are laid end to end (request order, then head order) and the
// line is cut into nb = min(C, max(1, total / min_tiles)) bins whose boundaries are
// start(c) = floor(c * total / nb): every bin holds floor or ceil of total / nb tiles (the
// budget), at least min_tiles unless the whole batch has fewer. A bin is one persistent CTA's
// work; an item that crosses bin boundaries becomes several tasks (parts) that write partial
// outputs + log-sum-exp into slots, merged later by the combine kernel; an item that fits one
// bin writes its final output directly. Static mode (the split-KV baseline): every item is
// cut into `static_splits` equal parts and tasks go to bins round robin.
//
// The plain-Python twin (hpc_attention/planner.py) implements the same arithmetic; the tests
// compare the two table by table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_common/pdl.cuh"

namespace hpc::attn {

struct Scan3 {
  int a, b, c;
};

// Exclusive scan over the block of (a, b, c); `total` gets the block sums. Any block size that
// is a multiple of 32, up to 1024.
__device__ __forceinline__ Scan3 block_exclusive_scan(Scan3 v, Scan3& total) {
  __shared__ Scan3 warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  Scan3 inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, inc.a, o);
    const int b = __shfl_up_sync(0xffffffffu, inc.b, o);
    const int c = __shfl_up_sync(0xffffffffu, inc.c, o);
    if (lane >= o) {
      inc.a += a;
      inc.b += b;
      inc.c += c;
    }
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    Scan3 w = lane < nwarps ? warp_sums[lane] : Scan3{0, 0, 0};
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, w.a, o);
      const int b = __shfl_up_sync(0xffffffffu, w.b, o);
      const int c = __shfl_up_sync(0xffffffffu, w.c, o);
      if (lane >= o) {
        w.a += a;
        w.b += b;
        w.c += c;
      }
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  const Scan3 base = warp > 0 ? warp_sums[warp - 1] : Scan3{0, 0, 0};
  total = warp_sums[nwarps - 1];
  __syncthreads();  // warp_sums may be reused by the next call
  return Scan3{base.a + inc.a - v.a, base.b + inc.b - v.b, base.c + inc.c - v.c};
}

// The cut of `total` tiles into `nb` bins: start(c) = floor(c * total / nb). 32-bit division
// whenever (total + 1) * nb fits (any realistic batch); 64-bit division is a slow software
// routine on the GPU and made the first planner version take 20 us.
struct BinLine {
  long long total;
  long long nb;
  bool narrow;
  __device__ __forceinline__ long long start(long long c) const {
    return narrow ? static_cast<long long>(static_cast<unsigned>(c * total) / static_cast<unsigned>(nb)) : c * total / nb;
  }
  __device__ __forceinline__ long long bin_of(long long x) const {
    const long long num = (x + 1) * nb + total - 1;
    return (narrow ? static_cast<long long>(static_cast<unsigned>(num) / static_cast<unsigned>(total)) : num / total) - 1;
  }
};

__device__ __forceinline__ int item_parts_dynamic(const BinLine& line, long long s, int n) {
  return n == 0 ? 0 : static_cast<int>(line.bin_of(s + n - 1) - line.bin_of(s) + 1);
}

__device__ __forceinline__ int static_chunk(int n, int splits) { return (n + splits - 1) / splits; }
__device__ __forceinline__ int item_parts_static(int n, int splits) {
  if (n == 0) return 0;
  const int chunk = static_chunk(n, splits);
  return (n + chunk - 1) / chunk;
}

__global__ void __launch_bounds__(kPlanThreads) decode_plan_kernel(const __grid_constant__ DecodePlanParams p) {
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();  // the decode kernel waits for our completion anyway
  const int tid = threadIdx.x;
  const int hkv = p.num_kv_heads;
  const int chunk = (p.batch + blockDim.x - 1) / blockDim.x;
  const int r0 = min(p.batch, tid * chunk), r1 = min(p.batch, r0 + chunk);
  auto length = [&](int b) {
    const int raw = p.kv_lens[b];
    return raw < 0 ? 0 : (raw > p.max_len ? p.max_len : raw);
  };
  auto tiles = [&](int len) { return (len + kTileTokens - 1) / kTileTokens; };

  // Pass 1: tiles per request (identical for every head of a request), clamped lengths.
  Scan3 mine{0, 0, 0};
  for (int b = r0; b < r1; ++b) {
    const int raw = p.kv_lens[b];
    mine.a += tiles(length(b));
    mine.b += (raw < 0 || raw > p.max_len) ? 1 : 0;
  }
  Scan3 tot1;
  const Scan3 pre1 = block_exclusive_scan(mine, tot1);
  const long long total = static_cast<long long>(tot1.a) * hkv;
  const bool dynamic = p.static_splits <= 0;
  BinLine line{total, 1, false};
  if (dynamic && total > 0) {
    long long nb = total / (p.min_tiles > 0 ? p.min_tiles : 1);
    nb = nb < 1 ? 1 : (nb > p.num_bins ? p.num_bins : nb);
    line.nb = nb;
    line.narrow = (total + 1) * nb + total < 0xFFFFFFFFll;
  }
  // Bin starts advance by q0 or q0 + 1: start(c + 1) = start(c) + q0 + (carry of c * rr mod nb).
  const long long q0 = total > 0 ? total / line.nb : 0, rr = total > 0 ? total % line.nb : 0;

  // Pass 2: tasks, partial slots and combine entries per request.
  Scan3 cnt{0, 0, 0};
  long long req_tiles = pre1.a;  // tiles of requests before b (one head)
  for (int b = r0; b < r1; ++b) {
    const int n = tiles(length(b));
    for (int h = 0; h < hkv; ++h) {
      const long long s = req_tiles * hkv + static_cast<long long>(h) * n;
      const int parts = dynamic ? item_parts_dynamic(line, s, n) : item_parts_static(n, p.static_splits);
      cnt.a += parts;
      cnt.b += parts > 1 ? parts : 0;
      cnt.c += (parts > 1 || parts == 0) ? 1 : 0;
    }
    req_tiles += n;
  }
  Scan3 tot2;
  const Scan3 pre2 = block_exclusive_scan(cnt, tot2);
  const int num_tasks = tot2.a;
  const int C = p.num_bins;
  // Static mode: task k goes to bin k % C at position base(k % C) + k / C.
  const int per_bin = num_tasks / C, extra = num_tasks % C;
  auto static_base = [&](int c) { return c * per_bin + min(c, extra); };

  // Pass 3: write the tables.
  int task = pre2.a, slot = pre2.b, comb = pre2.c;
  req_tiles = pre1.a;
  for (int b = r0; b < r1; ++b) {
    const int len = length(b);
    const int n = tiles(len);
    for (int h = 0; h < hkv; ++h) {
      const int item = b * hkv + h;
      const long long s = req_tiles * hkv + static_cast<long long>(h) * n;
      const int parts = dynamic ? item_parts_dynamic(line, s, n) : item_parts_static(n, p.static_splits);
      if (parts != 1) p.combine[comb++] = make_int4(item, parts > 1 ? slot : 0, parts, 0);
      if (dynamic) {
        const long long first_bin = parts > 0 ? line.bin_of(s) : 0;
        long long ce = parts > 0 ? line.start(first_bin) : 0;
        long long rem = parts > 0 ? static_cast<unsigned>(first_bin * rr) % static_cast<unsigned>(line.nb) : 0;
        for (int q = 0; q < parts; ++q) {
          const long long c = first_bin + q;
          const long long cs = ce;
          rem += rr;
          ce = cs + q0 + (rem >= line.nb ? 1 : 0);
          if (rem >= line.nb) rem -= line.nb;
          const long long gb = s > cs ? s : cs;
          const long long ge = (s + n) < ce ? (s + n) : ce;
          const int tile_end = static_cast<int>(ge - s);
          const int token_end = min(len, tile_end * kTileTokens);
          p.tasks[task] = make_int4(item, static_cast<int>(gb - s), token_end, parts > 1 ? slot + q : -1);
          if (gb == cs) p.bin_start[c] = task;
          ++task;
        }
      } else {
        const int ch = n > 0 ? static_chunk(n, p.static_splits) : 0;
        for (int q = 0; q < parts; ++q) {
          const int tb = q * ch, te = min(n, tb + ch);
          const int pos = static_base(task % C) + task / C;
          p.tasks[pos] = make_int4(item, tb, min(len, te * kTileTokens), parts > 1 ? slot + q : -1);
          ++task;
        }
      }
      if (parts > 1) slot += parts;
    }
    req_tiles += n;
  }

  const int nb_used = dynamic ? (total > 0 ? static_cast<int>(line.nb) : 0) : min(num_tasks, C);
  for (int c = tid; c <= C; c += blockDim.x) {
    if (!dynamic) {
      p.bin_start[c] = static_base(c);
    } else if (c >= nb_used) {
      p.bin_start[c] = num_tasks;
    }
  }
  if (tid == 0) {
    p.counters[kNumTasks] = num_tasks;
    p.counters[kNumCombine] = tot2.c;
    p.counters[kBudget] = dynamic ? (total > 0 ? static_cast<int>((total + line.nb - 1) / line.nb) : 0) : 0;
    p.counters[kTotalTiles] = static_cast<int>(total);
    p.counters[kNumSlots] = tot2.b;
    p.counters[kNumBinsUsed] = nb_used;
    p.counters[kNumClamped] = tot1.b;
    p.counters[7] = 0;
  }
}

inline cudaError_t launch_decode_plan(const DecodePlanParams& p, cudaStream_t stream, bool pdl) {
  return hpc::launch_kernel(decode_plan_kernel, dim3(1), dim3(kPlanThreads), 0, stream, pdl, p);
}

}  // namespace hpc::attn
