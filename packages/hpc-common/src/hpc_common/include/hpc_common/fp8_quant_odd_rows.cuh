// Odd group rows: dynamic group scales on rows that are not 16-byte aligned (odd row lengths such as
// N = 4095), x and q misaligned alike (p.peel), so every group's aligned cover starts and ends with a
// vector it shares with its neighbours. One tile of up to 256 / team consecutive groups per CTA, a team
// of seg_vecs / 4 lanes per group (the row tile kernel's geometry, prepare_row_tiles), each lane with a
// fifth slot for the cover's one extra vector and the team's lead (below).
//
// Why this form: a version inside quant_tile (a kMis branch)
// was issue-bound (ncu, 64 MB bf16 group-128 N = 4095: 28.6 M instructions at 69 % of issue slots, 2.4x
// the column tile kernel's for the same bytes). Every warp ran the masked amax and the byte-exact store
// of both shared vectors (lane 0 of each of its teams), 35-75 instructions per slot behind a divergent
// branch, and the two teams sharing a vector wrote it in 1-, 2- and 4-byte pieces (39 % excessive store
// sectors). Here:
//   - the amax masks are four words per shared vector, computed once per lane and folded into the
//     amax's own LOP3 (masked elements read as +0, which leaves the amax unchanged);
//   - a shared vector is stored once, whole: the team that ends in it merges its bytes with the next
//     team's, which hands over its quantised head through shared memory (one barrier). Only vectors
//     shared across the tile's edges (or with a row that does not follow in memory) keep the byte-exact
//     pieces, so two of a CTA's warps take that path instead of all of them;
//   - the segment's row comes from a multiply-shift (locate_cover), not a 32-bit division;
//   - a team's slots start at a 32-byte boundary of q (`lead`), so its store instructions write whole
//     sectors (ncu of the form without it: L2 86 % busy at 54 % DRAM, 33 % excessive sectors).
// H200, 64 MB bf16 group-128 N = 4095, A B A in one process: 43.3 -> 37.3 us (written flush), 39.5 ->
// 33.1 back to back (run of 1aa7696); the lead: 37.1 -> 36.1 and 33.1 -> 31.0 (run of f1a9735).
#pragma once

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_tile_geometry.cuh"

namespace hpc {
namespace fp8 {

#if defined(__CUDACC__)

// The bits of a 32-bit word that hold its bytes [from, 4): all for from <= 0, none for from >= 4.
__device__ __forceinline__ uint32_t bytes_from(int from) {
  return __funnelshift_lc(0u, 0xffffffffu, uint32_t(max(0, 8 * from)));  // shifts of 32 and more give 0
}

// What the teams of a tile hand each other: the quantised head vector of each team whose first vector
// is shared with the previous segment, and where each team's shared first / last vector lies in q (0:
// none, or a one-vector segment that stores its bytes itself).
struct OddRowsExchange {
  unsigned long long head_at[kBulkThreads];
  unsigned long long tail_at[kBulkThreads];
  uint32_t head_words[kBulkThreads][2];
};

template <int DT, int VEC>
__device__ __forceinline__ void quant_odd_rows(const QuantParams& p, OddRowsExchange& xs, uint32_t* red) {
  using P = Pack<DT, VEC>;
  using raw = typename Elem<DT>::raw;
  constexpr int VPT = kBulkVecPerThread, NS = VPT + 1, ES = int(sizeof(raw)), QW = VEC / 4;
  hpc::pdl_wait();
  hpc::pdl_launch_dependents();

  // Team: a power of two up to 32 lanes, else whole warps (row_tile_team).
  const int team = p.team;
  const int seg_local = team <= 32 ? int(threadIdx.x) >> (__ffs(team) - 1) : int(threadIdx.x) / team;
  const int lane = int(threadIdx.x) - seg_local * team;
  const uint32_t s0 = blockIdx.x * uint32_t(p.tile_segs);  // one run of every segment (prepare_row_tiles)
  const int count = int(min(int64_t(p.tile_segs), p.run_segs - int64_t(s0)));
  const bool active = seg_local < count;
  const Segment sg = locate_cover(p, s0 + uint32_t(active ? seg_local : 0));
  const raw* xs0 = static_cast<const raw*>(p.x) + sg.x_off;
  const int mis = int((reinterpret_cast<uintptr_t>(xs0) / ES) & (VEC - 1));  // q is misaligned alike
  const raw* x = xs0 - mis;                 // the cover: aligned vectors 0..last
  uint8_t* q = p.q + sg.q_off - mis;
  const int span = int(sg.len) + mis;
  const int last = (span - 1) / VEC;        // the cover's last vector ...
  const int end = span - last * VEC;        // ... holds the segment's elements [0, end), end in [1, VEC]

  // Slot j of a lane holds cover vector lane + team * j - lead: with lead > 0 the team's positions start
  // `lead` vectors before the cover, at a 32-byte boundary of q (kSectorVecs vectors: q holds a byte per
  // element), so each store instruction of a 4-lane team writes whole sectors and each load instruction
  // reads 64 bytes from a 32-byte boundary of x (x's vectors are misaligned alike). The positions before
  // the cover are dead; the fifth slot then holds the cover's last vectors on lanes up to lead (a team of
  // at least kSectorVecs lanes has the room: its 5 x team positions cover seg_vecs + 1 + lead). Smaller
  // teams keep lead 0 and the fifth slot on lane 0 only.
  constexpr int kSectorVecs = 32 / VEC;
  const int lead = team >= kSectorVecs ? int((reinterpret_cast<uintptr_t>(q) / VEC) & (kSectorVecs - 1)) : 0;
  P pk[NS];
  int vidx[NS];
  bool live[NS];
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    vidx[j] = lane + team * j - lead;
    live[j] = active && vidx[j] >= 0 && vidx[j] <= last;
    if (live[j]) pk[j].load(x + vidx[j] * VEC);
  }

  // Amax over the segment's elements only: vector 0 (slot 0 of lane `lead`, as lead < team) from element mis, vector
  // `last` up to element end; both masks are all ones where they do not apply.
  uint32_t head_keep[4], tail_keep[4];
  const int head_from = lane == lead ? mis * ES : 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    head_keep[k] = bytes_from(head_from - 4 * k);
    tail_keep[k] = ~bytes_from(end * ES - 4 * k);
  }
  AmaxAcc<DT, VEC> acc;
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    if (!live[j]) continue;
    P part = pk[j];
    const bool is_last = vidx[j] == last;
    uint32_t keep[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) keep[k] = (j == 0 ? head_keep[k] : ~0u) & (is_last ? tail_keep[k] : ~0u);
    part.and_words(keep);
    acc.add(part);
  }
  const uint32_t m = active ? acc.bits() : 0u;
  const float scale = scale_from_amax_bits(team_max<false>(m, team, red), p.ue8m0);
  const float inv = div_rn(1.0f, scale);

  // Whole vectors now; the shared ones after the exchange.
  const bool single = last == 0;                  // one vector: its bytes [mis, end), stored below
  const bool head_shared = active && lane == lead && mis > 0;
  bool holds_tail = false;                        // this lane holds vector `last`
  uint32_t head_w[QW], tail_w[QW];
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    if (!live[j]) continue;
    uint32_t w[QW];
    pk[j].quantised_words(inv, w);
    const bool is_head = j == 0 && head_shared, is_last = vidx[j] == last;
    if (is_head) {
#pragma unroll
      for (int k = 0; k < QW; ++k) head_w[k] = w[k];
    }
    if (is_last) {
      holds_tail = true;
#pragma unroll
      for (int k = 0; k < QW; ++k) tail_w[k] = w[k];
    }
    if (!is_head && !(is_last && end < VEC)) P::store_words(q + vidx[j] * VEC, w);
  }
  const bool tail_shared = holds_tail && end < VEC;
  const unsigned long long head_at = reinterpret_cast<unsigned long long>(q);
  const unsigned long long tail_at = reinterpret_cast<unsigned long long>(q + last * VEC);
  if (active && lane == lead) xs.head_at[seg_local] = head_shared && !single ? head_at : 0ull;
  if (head_shared) {
#pragma unroll
    for (int k = 0; k < QW; ++k) xs.head_words[seg_local][k] = head_w[k];
  }
  if (holds_tail) xs.tail_at[seg_local] = tail_shared && !single ? tail_at : 0ull;
  __syncthreads();

  if (single) {  // lane `lead` holds the one vector in slot 0
    if (holds_tail && (mis > 0 || end < VEC)) P::store_words_range(q, tail_w, mis, end);
  } else {
    if (tail_shared) {  // merge with the next team's head where it is the same vector
      if (seg_local + 1 < count && xs.head_at[seg_local + 1] == tail_at) {
        uint32_t w[QW];
#pragma unroll
        for (int k = 0; k < QW; ++k) {
          const uint32_t next = bytes_from(end - 4 * k);  // the next segment's bytes of word k
          w[k] = (tail_w[k] & ~next) | (xs.head_words[seg_local + 1][k] & next);
        }
        P::store_words(q + last * VEC, w);
      } else {
        P::store_words_range(q + last * VEC, tail_w, 0, end);
      }
    }
    if (head_shared && !(seg_local > 0 && xs.tail_at[seg_local - 1] == head_at)) {
      P::store_words_range(q, head_w, mis, VEC);  // the previous team did not merge it
    }
  }
  if (active && lane == 0) write_scale(p, sg.row, sg.g, scale);
}

// Compiled for 4 CTAs per SM (at 5, 48 registers, it spilled 24-56 bytes).
constexpr int kOddRowMinBlocks = 4;
template <int DT, int VEC>
__global__ void __launch_bounds__(kBulkThreads, kOddRowMinBlocks) fp8_quant_odd_row_tile_kernel(const QuantParams p) {
  __shared__ uint32_t red[kBulkThreads / 32];
  __shared__ OddRowsExchange xs;
  quant_odd_rows<DT, VEC>(p, xs, red);
}

#endif  // __CUDACC__

}  // namespace fp8
}  // namespace hpc
