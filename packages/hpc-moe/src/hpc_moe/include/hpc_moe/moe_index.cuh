// The routing index, built in shared memory by every CTA that needs it (no index kernel, no
// global memory, no global atomics): per-expert counts by shared atomics, an exclusive scan into
// contiguous per-expert ranges in expert order, then each pair placed in its expert's range.
// The order of pairs inside a range follows the atomics: it differs from CTA to CTA and run to run.
// So a range is only ever consumed whole by one CTA (a Gate-Up task is an (expert, tile) pair, all
// of the expert's pairs; a Down CTA uses its own index alone), and nothing else depends on the order
// (each pair is its own MMA column and its own row of `inter`): outputs stay deterministic.
#pragma once

#include <cuda_runtime.h>

#include "hpc_moe/moe_device.cuh"
#include "hpc_moe/moe_params.h"

namespace hpc::moe {

struct SmemIndex {
  int* cnt;     // [E]   pairs per local expert
  int* start;   // [E+1] first slot of each expert's range; start[E] = pairs kept
  int* tstart;  // [E+1] Gate-Up only: first task of each expert (`tiles` tasks per expert with pairs)
  int* active;  // [E]   Down only: the experts with pairs, ascending; active_n[0] of them
  int* active_n;
  int* list;    // [num_pairs] pair index (relative to the first pair read) of each slot

  __device__ static int words(int E, int num_pairs) { return 5 * E + 3 + num_pairs; }
  __device__ static SmemIndex carve(int* s, int E) {
    SmemIndex x;
    x.cnt = s;
    x.start = s + E;
    x.tstart = s + 2 * E + 1;
    x.active = s + 3 * E + 2;
    x.active_n = s + 4 * E + 2;
    x.list = s + 4 * E + 3 + E;  // [4E+3, 5E+3) is the placement cursor
    return x;
  }
  __device__ int* cursor(int E) const { return list - E; }
};

// Index of pairs [p0, p0 + n) of `ids`. tiles > 0: also the Gate-Up task ranges. Ends with a
// __syncthreads(); every thread of the CTA must call it.
__device__ __forceinline__ void build_index(const SmemIndex& x, const void* ids, int ids_int64, int p0, int n,
                                            int expert_start, int E, int tiles) {
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += kThreads) x.cnt[e] = 0;
  __syncthreads();
  for (int i = tid; i < n; i += kThreads) {
    const int e = local_expert(ids, ids_int64, p0 + i, expert_start, E);
    if (e >= 0) atomicAdd(&x.cnt[e], 1);
  }
  __syncthreads();
  if (tid < 32) {  // one warp scans: each lane a contiguous run of experts
    const int lane = tid;
    const int per = (E + 31) / 32;
    const int e0 = min(E, lane * per), e1 = min(E, e0 + per);
    int slots = 0, tasks = 0, act = 0;
    for (int e = e0; e < e1; ++e) {
      const int c = x.cnt[e];
      slots += c;
      tasks += c > 0 ? tiles : 0;
      act += c > 0;
    }
    int s_incl = slots, t_incl = tasks, a_incl = act;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int s = __shfl_up_sync(0xffffffffu, s_incl, o);
      const int t = __shfl_up_sync(0xffffffffu, t_incl, o);
      const int a = __shfl_up_sync(0xffffffffu, a_incl, o);
      if (lane >= o) s_incl += s, t_incl += t, a_incl += a;
    }
    int s = s_incl - slots, t = t_incl - tasks, a = a_incl - act;
    int* cur = x.cursor(E);
    for (int e = e0; e < e1; ++e) {
      const int c = x.cnt[e];
      x.start[e] = s;
      cur[e] = s;
      x.tstart[e] = t;
      if (c > 0) x.active[a++] = e;
      s += c;
      t += c > 0 ? tiles : 0;
    }
    if (lane == 31) {
      x.start[E] = s_incl;
      x.tstart[E] = t_incl;
      x.active_n[0] = a_incl;
    }
  }
  __syncthreads();
  int* cur = x.cursor(E);
  for (int i = tid; i < n; i += kThreads) {
    const int e = local_expert(ids, ids_int64, p0 + i, expert_start, E);
    if (e >= 0) x.list[atomicAdd(&cur[e], 1)] = i;
  }
  __syncthreads();
}

// The expert of Gate-Up task `task`: the last e with tstart[e] <= task (experts without tasks
// have empty ranges and are never returned).
__device__ __forceinline__ int task_expert(const SmemIndex& x, int E, int task) {
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (x.tstart[mid] <= task) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace hpc::moe
