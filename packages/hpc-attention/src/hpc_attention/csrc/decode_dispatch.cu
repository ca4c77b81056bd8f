// Host side of the TMA producer: tensor maps of the paged K / V caches, encoded once per cache
// layout and reused (a call with a known layout costs a map lookup, no driver call).
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

#include "hpc_attention/decode_params.h"
#include "hpc_common/tma_encode.h"

namespace {

using Key = std::array<uint64_t, 8>;

// Bounded so a process that keeps allocating new caches cannot grow it without end.
constexpr size_t kMaxMaps = 4096;

cudaError_t kv_map(CUtensorMap* out, const void* ptr, bool fp8, int num_pages, int page_size, int hkv,
                   long long s_page, long long s_tok, long long s_head, bool wide_promotion) {
  static std::mutex mu;
  static std::map<Key, CUtensorMap> cache;
  const uint64_t e = fp8 ? 1 : 2;
  const Key key{reinterpret_cast<uint64_t>(ptr), (uint64_t(fp8) << 63) | uint64_t(num_pages),
                uint64_t(page_size), uint64_t(hkv), uint64_t(s_page), uint64_t(s_tok), uint64_t(s_head), uint64_t(wide_promotion)};
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
  // promotion would fetch them twice (run 1: 64/8 FP8 streamed at 2.7 TB/s with it, 3.2 with
  // cp.async). A BF16 row is 256 B read as two 128-byte boxes, and 256-byte promotion (the BF16
  // default until the twenty-first session) has each box ask the L2 for the whole row: a bare stream
  // of the 8/1 pages (scripts/page_stream_rate.cu tmap, H200, read flush) read 36.3-37.4 us with it
  // against 34.2-35.7 with 128-byte or no promotion and 33.7-35.5 with 1-D bulk copies; the decode
  // call, same process: 64/8 BF16 64x4K 263.7 -> 244.4 us, 8/1 44.8 -> 41.7 after a read flush, 0-3 us
  // after the written one (benchmarks/results/h200/decode_attention_promotion_*_99b1887.*).
  // `wide_promotion` forces 256 B (diagnostics, DIAG flags bit 1).
  const auto promo = wide_promotion ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  cudaError_t err = hpc::tma::encode_tiled(&map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                           4, ptr, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, promo);
  if (err != cudaSuccess) return err;
  if (cache.size() >= kMaxMaps) cache.clear();
  cache.emplace(key, map);
  *out = map;
  return cudaSuccess;
}

}  // namespace

// Fills p.k_map and p.v_map from the cache pointers, shape and strides already in `p`.
// Returns an error (and leaves the maps unusable) when the driver has no encoder or rejects
// the layout; the caller then runs the cp.async producer instead.
cudaError_t hpc_attn_paged_kv_tensor_maps(hpc::attn::PagedDecodeParams& p, bool fp8_kv) {
  const int page_size = 1 << p.page_size_log2;
  const bool wide = (p.diag & 2) != 0;
  cudaError_t e = kv_map(&p.k_map, p.k_cache, fp8_kv, p.num_pages, page_size, p.num_kv_heads, p.k_stride_page,
                         p.k_stride_tok, p.k_stride_head, wide);
  if (e != cudaSuccess) return e;
  return kv_map(&p.v_map, p.v_cache, fp8_kv, p.num_pages, page_size, p.num_kv_heads, p.v_stride_page,
                p.v_stride_tok, p.v_stride_head, wide);
}
