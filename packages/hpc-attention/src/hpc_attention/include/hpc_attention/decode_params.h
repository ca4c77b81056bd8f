// Parameter structs of the decode-attention kernels: plain data shared by the kernels and the
// binding layer (host-only code includes this file, never the kernel headers).
#pragma once

#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver call here)
#include <cuda_runtime.h>

#include <cstdint>

namespace hpc::attn {

constexpr int kPlanThreads = 512;  // 1024 capped registers at 64 and spilled
constexpr int kTileTokens = 64;

// Counter slots written by the planner (int32).
enum PlanCounter : int {
  kNumTasks = 0,
  kNumCombine = 1,
  kBudget = 2,      // ceil(line / nb) in dynamic mode (line = tiles + task_cost per item), 0 in static
  kTotalTiles = 3,
  kNumSlots = 4,
  kNumBinsUsed = 5,
  kNumClamped = 6,  // requests whose length was outside [0, max_len] and got clamped
  kNumTailBins = 7,  // claimable tail bins (after the num_bins owned ones), 0 without a tail
  kNumCounters = 8,
};

struct DecodePlanParams {
  const int32_t* kv_lens;  // [batch]
  int batch;
  int num_kv_heads;
  int num_bins;       // C: persistent CTAs of the decode kernel
  int min_tiles;      // work floor per bin (dynamic mode)
  int static_splits;  // 0: dynamic; > 0: fixed splits per item
  int max_len;        // lengths are clamped into [0, max_len] (page-table capacity)
  int task_cost;      // dynamic mode: tiles' worth of fixed cost charged per non-empty item
  int cost_cap;       // 1: no charge makes an item longer than the tiles-only budget (ItemCharge)
  // Claimable tail (dynamic mode, only when all num_bins bins are used): the last tail_percent %
  // of the work line is cut into bins of tail_bin units, at most max_tail_bins of them, after the
  // num_bins owned bins; CTAs that finish their own bin claim them in order (decode.cuh).
  int tail_percent;
  int tail_bin;
  int max_tail_bins;
  int4* tasks;        // {item, tile_begin, token_end, slot or -1}, bin-major
  int32_t* bin_start; // [num_bins + max_tail_bins + 1]
  int4* bin_first;    // [num_bins + max_tail_bins]: copy of the first task of each non-empty bin (the
                      // decode kernel loads it with bin_start instead of after it: one dependent load fewer)
  int4* combine;      // {item, first slot, parts (0: empty item -> zeros), 0}
  int32_t* counters;  // [kNumCounters]
  int2* slot_meta;    // [slots]: {first slot, parts} of the split item that owns the slot
  // Optional (page_table nullptr: not written): the page table the decode kernel will read, and
  // bin_first_page[bin] = the (unclamped) page id of the first tile of each non-empty bin's first
  // task. The decode kernel loads it with bin_start / bin_first and issues the bin's first KV
  // copies without waiting for a page-table read (one dependent DRAM round trip fewer, ~1 us).
  const int32_t* page_table;  // [B, max_pages]
  long long page_table_stride;
  int page_size_log2;
  int32_t* bin_first_page;  // [num_bins + max_tail_bins]
  // Head-major line (dynamic plans; set by set_line_order): line_heads = the real Hkv (> 1). The
  // planner then sees batch = B * Hkv virtual requests of one KV head each, v = h * B + b, and
  // num_kv_heads = 1, so the line holds every request of head 0, then of head 1, ...;
  // line_batch = B and line_batch_magic = floor((2^32 - 1) / B) turn v back into (b, h).
  // 0: the request-major line (request by request, its heads in order).
  int line_heads;
  int line_batch;
  unsigned line_batch_magic;
  // Bins the line may be cut into: num_bins, or, head-major, num_bins rounded down to a multiple
  // of Hkv, so that every head's stretch of the line is cut at the same token positions.
  int cut_bins;
};

// Fill the line-order fields of a plan's parameters (batch, num_kv_heads, num_bins and
// static_splits set). cut_to_heads (head-major only): cut the line into a multiple of Hkv bins
// (the default, heuristics.HEAD_MAJOR_CUT_TO_HEADS), else into up to num_bins. Why head-major (H200):
// with every head's line cut alike, the CTAs that run in step read all KV heads of the same pages
// together; 64/8 plans ran 1-4 us faster (twin plans fed to the kernel) than with the request-major line.
inline void set_line_order(DecodePlanParams& p, bool head_major, bool cut_to_heads = true) {
  p.cut_bins = p.num_bins;
  p.line_heads = 0;
  p.line_batch = 0;
  p.line_batch_magic = 0;
  if (head_major && p.num_kv_heads > 1 && p.static_splits <= 0 && p.batch > 0) {
    p.line_heads = p.num_kv_heads;
    p.line_batch = p.batch;
    p.line_batch_magic = 0xffffffffu / static_cast<unsigned>(p.batch);
    p.batch *= p.num_kv_heads;
    p.num_kv_heads = 1;
    if (cut_to_heads && p.num_bins >= p.line_heads) p.cut_bins = p.num_bins - p.num_bins % p.line_heads;
  }
}

struct DecodeParams {
  // TMA producer only (launch with tma = true): 4-D maps of the K and V caches over
  // (dim, head, token in page, page), box (128 B of dim, 1 head, min(page, 64) tokens, 1 page),
  // 128-byte swizzle. Encoded on the host (csrc/decode_dispatch.cu, cached per layout) and read
  // from the kernel's parameter space (__grid_constant__): a CUDA graph replays the baked maps,
  // which is right because a KV cache does not move while it is in use.
  CUtensorMap k_map;
  CUtensorMap v_map;
  const void* q;  // [B, Hq, 128] BF16 or E4M3
  long long q_stride_b, q_stride_h;  // elements
  const float* q_scale;              // [B, Hq] FP32 (FP8 Q only)
  long long q_scale_stride_b, q_scale_stride_h;
  const void* k_cache;  // [num_pages, page_size, Hkv, 128] BF16 or E4M3
  const void* v_cache;
  long long k_stride_page, k_stride_tok, k_stride_head;  // elements
  long long v_stride_page, v_stride_tok, v_stride_head;
  int num_pages;
  int page_size_log2;
  const int32_t* page_table;  // [B, max_pages]
  long long page_table_stride;
  const int4* tasks;
  const int32_t* bin_start;
  const int4* bin_first;  // [num_bins]: copy of each non-empty bin's first task (planner)
  // nullptr, or the planner's page id of each non-empty bin's first tile for this page table
  // (used with pages of >= 64 tokens only: a tile then lies in one page; ids clamped here).
  const int32_t* bin_first_page;
  void* out;  // [B, Hq, 128] BF16
  long long out_stride_b, out_stride_h;
  float* partial_o;    // [slots, G, 128]
  float* partial_lse;  // [slots, G] (log2 domain)
  // Merge of split items inside the decode kernel (merge != 0; the combine kernel is then not
  // launched): the last part of an item to finish merges it (see decode.cuh); merge == 2:
  // in the TMA kernel by its two helper warps instead of the consumers (decode_merge_in_kernel.cuh).
  // merge == 0: the dispatch (csrc/decode_dispatch.cu) launches the combine kernel after the decode.
  int merge;
  const int2* slot_meta;  // [slots]: {first slot f, parts P}
  int* merge_counts;      // [slots], zero between calls: arrivals per item (index f) / group (f + 1 + g)
  const int4* combine;    // {item, first slot, parts, 0}: entries with parts == 0 (empty items) -> zeros
  const int32_t* counters;  // counters[kNumTailBins]: claimable tail bins after the gridDim.x owned ones
  int* claim_counter;       // zero between calls: tail bins claimed so far (the last claim resets it)
  const float* k_scale_ptr;  // optional device scales (read once); nullptr: use the floats
  const float* v_scale_ptr;
  float k_scale, v_scale;
  float sm_scale_log2;  // softmax scale * log2(e)
  int num_kv_heads;
  int group;  // G = Hq / Hkv, 1..16
  int bin_heads;  // > 1: CTA c runs bin (c % bin_heads) * nb1 + c / bin_heads (own_bin); else bin c
  // KV loads before the PDL wait (TMA producer only; decode's `new_tokens`): n >= 1 promises that the previous kernel
  // on the stream writes at most the last n KV positions of each request (and q, q_scale, out), and that the plan, the
  // page table and every older KV position were written before it started. The producer then reads the bin's tables
  // and copies the first task's tiles that end at least n tokens before the task's end into the ring (at most
  // kEarlyTilesMax, decode_config.cuh) before griddepcontrol.wait; the task's Q rows follow after the wait. <= 0:
  // nothing is read before the wait (the default).
  int early_kv_tokens;
};

constexpr int kCombineThreads = 256;

struct DecodeCombineParams {
  const int4* combine;      // {item, first slot, parts, 0}
  const int32_t* counters;  // counters[1] = number of entries
  const float* partial_o;   // [slots, G, 128]
  const float* partial_lse; // [slots, G], log2 domain
  void* out;                // [B, Hq, 128] BF16
  long long out_stride_b, out_stride_h;
  int num_kv_heads;
  int group;
};

}  // namespace hpc::attn
