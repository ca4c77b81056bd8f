// The decode planner's static mode (the split-KV baseline), out of line: see decode_plan.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_attention/decode_plan_common.cuh"

namespace hpc::attn {

// Static mode (the split-KV baseline), out of line like the general dynamic plan.
__device__ __noinline__ void plan_static(const DecodePlanParams& p, int r0, int r1, long long total, int clamped) {
  const int tid = threadIdx.x;
  const int hkv = p.num_kv_heads;
  auto length = [&](int b) { return clamp_len(p, p.kv_lens[b]); };
  auto tiles = tiles_of;

  // Static mode (the split-KV baseline): every item in `static_splits` equal parts, tasks
  // dealt to the bins round robin.
  int cnt[4] = {0, 0, 0, 0};
  for (int b = r0; b < r1; ++b) {
    const int n = tiles(length(b));
    const int parts = item_parts_static(n, p.static_splits);
    cnt[0] += parts * hkv;
    cnt[1] += parts > 1 ? parts * hkv : 0;
    cnt[2] += (parts > 1 || parts == 0) ? hkv : 0;
  }
  int tot2[4];
  block_scan<3, false>(cnt, tot2, plan_shared().scan[2]);
  const int num_tasks = tot2[0];
  const int C = p.num_bins;
  // Task k goes to bin k % C at position base(k % C) + k / C.
  const int per_bin = num_tasks / C, extra = num_tasks % C;
  auto static_base = [&](int c) { return c * per_bin + min(c, extra); };
  int task = cnt[0], slot = cnt[1], comb = cnt[2];
  for (int b = r0; b < r1; ++b) {
    const int len = length(b);
    const int n = tiles(len);
    const int parts = item_parts_static(n, p.static_splits);
    const int ch = n > 0 ? static_chunk(n, p.static_splits) : 0;
    for (int h = 0; h < hkv; ++h) {
      const int item = b * hkv + h;
      if (parts != 1) p.combine[comb++] = make_int4(item, parts > 1 ? slot : 0, parts, 0);
      for (int q = 0; q < parts; ++q) {
        const int tb = q * ch, te = min(n, tb + ch);
        const int pos = static_base(task % C) + task / C;
        const int4 t4 = make_int4(item, tb, min(len, te * kTileTokens), parts > 1 ? slot + q : -1);
        p.tasks[pos] = t4;
        if (task < C) {  // task k < C is the first of bin k
          p.bin_first[task] = t4;
          note_first(task, b, tb);
        }
        if (parts > 1) p.slot_meta[slot + q] = make_int2(slot, parts);
        ++task;
      }
      if (parts > 1) slot += parts;
    }
  }
  const int nb_used = min(num_tasks, C);
  for (int c = tid; c <= C + p.max_tail_bins; c += kPlanThreads) p.bin_start[c] = c <= C ? static_base(c) : num_tasks;
  write_totals(p, {num_tasks, tot2[2], 0, static_cast<int>(total), tot2[1], nb_used, clamped, 0});
}

}  // namespace hpc::attn
