// The decode attention's thin host layer (decode_api.h): the TMA producer's tensor maps, the choice of
// kernel instantiation, and the launches of the planner, the decode kernel and the combine kernel.
//
// Tensor maps of the paged K / V caches are encoded once per cache layout and reused (a call with a
// known layout costs a map lookup, no driver call).
//
// Key: (data pointer, dtype, num_pages, page_size, Hkv, the three outer strides). A layer's
// cache keeps its pointer and layout for the life of the model, so a serving process holds two
// maps per layer. The maps are copied into the kernel's parameters, so a CUDA graph that
// captured a decode call replays the maps of capture time: right as long as the cache tensor
// is not reallocated (the same assumption the graph makes for every other pointer).
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "hpc_attention/decode_api.h"
#include "hpc_common/tma_encode.h"

namespace {

using Key = std::array<uint64_t, 7>;

// Bounded so a process that keeps allocating new caches cannot grow it without end.
constexpr size_t kMaxMaps = 4096;

cudaError_t kv_map(CUtensorMap* out, const void* ptr, bool fp8, int num_pages, int page_size, int hkv,
                   long long s_page, long long s_tok, long long s_head) {
  static std::mutex mu;
  static std::map<Key, CUtensorMap> cache;
  const uint64_t e = fp8 ? 1 : 2;
  const Key key{reinterpret_cast<uint64_t>(ptr), (uint64_t(fp8) << 63) | uint64_t(num_pages),
                uint64_t(page_size), uint64_t(hkv), uint64_t(s_page), uint64_t(s_tok), uint64_t(s_head)};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  // (dim, head, token in page, page); a box is one 128-byte swizzle span of one row (128 FP8
  // or 64 BF16 values), min(page_size, 64) tokens of one head of one page.
  const uint64_t dims[4] = {128, uint64_t(hkv), uint64_t(page_size), uint64_t(num_pages)};
  const uint64_t strides[3] = {uint64_t(s_head) * e, uint64_t(s_tok) * e, uint64_t(s_page) * e};
  const uint32_t box[4] = {uint32_t(128 / e), 1, uint32_t(page_size < 64 ? page_size : 64), 1};
  CUtensorMap map;
  // L2 promotion 128 B, the box's own row span, for both dtypes. An FP8 row is 128 B and, with several
  // KV heads, the next 128 B belong to another head that another CTA reads at another time: 256-byte
  // promotion would fetch them twice (64/8 FP8 streamed at 2.7 TB/s with it, 3.2 with cp.async). A BF16
  // row is 256 B read as two 128-byte boxes, and 256-byte promotion has each box ask the L2 for the whole
  // row: a bare stream of the 8/1 pages (tools/probes/attention/page_stream_rate.cu tmap, H200, read
  // flush) read 36.3-37.4 us with it against 34.2-35.7 with 128-byte or no promotion; the decode call,
  // same process: 64/8 BF16 64x4K 263.7 -> 244.4 us, 8/1 44.8 -> 41.7 after a read flush.
  cudaError_t err = hpc::tma::encode_tiled(&map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                           4, ptr, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  if (err != cudaSuccess) return err;
  if (cache.size() >= kMaxMaps) cache.clear();
  cache.emplace(key, map);
  *out = map;
  return cudaSuccess;
}

// Fills p.k_map and p.v_map from the cache pointers, shape and strides already in `p`. Returns an error
// (and leaves the maps unusable) when the driver has no encoder or rejects the layout.
cudaError_t kv_tensor_maps(hpc::attn::DecodeParams& p, bool fp8_kv) {
  const int page_size = 1 << p.page_size_log2;
  cudaError_t e = kv_map(&p.k_map, p.k_cache, fp8_kv, p.num_pages, page_size, p.num_kv_heads, p.k_stride_page,
                         p.k_stride_tok, p.k_stride_head);
  if (e != cudaSuccess) return e;
  return kv_map(&p.v_map, p.v_cache, fp8_kv, p.num_pages, page_size, p.num_kv_heads, p.v_stride_page,
                p.v_stride_tok, p.v_stride_head);
}

}  // namespace

// The kernel instantiations, one translation unit each so they compile in parallel (csrc/decode_*.cu).
cudaError_t hpc_attn_launch_decode_plan(const hpc::attn::DecodePlanParams& p, cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_decode_bf16kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                          cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_decode_fp8kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                         cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_decode_tma_bf16kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                              cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_decode_tma_fp8kv(const hpc::attn::DecodeParams& p, bool fp8_q, int num_ctas,
                                             cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_decode_combine(const hpc::attn::DecodeCombineParams& p, int num_ctas,
                                           cudaStream_t stream, bool pdl);

namespace hpc::attn {

cudaError_t run_decode_plan(DecodePlanParams p, bool head_major, bool cut_to_heads, cudaStream_t stream, bool pdl) {
  set_line_order(p, head_major, cut_to_heads);
  return hpc_attn_launch_decode_plan(p, stream, pdl);
}

cudaError_t run_decode(DecodeParams p, const DecodeLaunch& l) {
  if (p.num_kv_heads < 1 || p.group < 1 || p.group > 16 || l.num_ctas < 1) return cudaErrorInvalidValue;
  cudaError_t e;
  if (l.tma) {
    e = kv_tensor_maps(p, l.fp8_kv);
    if (e != cudaSuccess) return e;
    e = l.fp8_kv ? hpc_attn_launch_decode_tma_fp8kv(p, l.fp8_q, l.num_ctas, l.stream, l.pdl)
                 : hpc_attn_launch_decode_tma_bf16kv(p, l.fp8_q, l.num_ctas, l.stream, l.pdl);
  } else {
    e = l.fp8_kv ? hpc_attn_launch_decode_fp8kv(p, l.fp8_q, l.num_ctas, l.stream, l.pdl)
                 : hpc_attn_launch_decode_bf16kv(p, l.fp8_q, l.num_ctas, l.stream, l.pdl);
  }
  if (e != cudaSuccess || p.merge != 0) return e;
  // Split items merged by the combine kernel, which also writes the empty items' zero rows.
  DecodeCombineParams c{};
  c.combine = p.combine;
  c.counters = p.counters;
  c.partial_o = p.partial_o;
  c.partial_lse = p.partial_lse;
  c.out = p.out;
  c.out_stride_b = p.out_stride_b;
  c.out_stride_h = p.out_stride_h;
  c.num_kv_heads = p.num_kv_heads;
  c.group = p.group;
  return hpc_attn_launch_decode_combine(c, l.combine_ctas, l.stream, l.pdl);
}

}  // namespace hpc::attn
