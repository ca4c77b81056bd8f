// Python bindings of hpc_attention's kernels: raw pointers, sizes and the stream cross here,
// no torch types. Arguments are passed by keyword from hpc_attention/decode.py.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "hpc_attention/decode_params.h"
#include "hpc_common/check.h"

namespace py = pybind11;
using std::uintptr_t;
using namespace hpc::attn;

cudaError_t hpc_attn_launch_decode_plan(const DecodePlanParams& p, cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_paged_decode_bf16kv(const PagedDecodeParams& p, bool fp8_q, int num_ctas,
                                                 cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_paged_decode_fp8kv(const PagedDecodeParams& p, bool fp8_q, int num_ctas,
                                                cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_paged_decode_tma_bf16kv(const PagedDecodeParams& p, bool fp8_q, int num_ctas,
                                                     cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_launch_paged_decode_tma_fp8kv(const PagedDecodeParams& p, bool fp8_q, int num_ctas,
                                                    cudaStream_t stream, bool pdl);
cudaError_t hpc_attn_paged_kv_tensor_maps(PagedDecodeParams& p, bool fp8_kv);
cudaError_t hpc_attn_launch_decode_combine(const DecodeCombineParams& p, int num_ctas, cudaStream_t stream,
                                           bool pdl);

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_attention CUDA kernels (decode planner, paged decode, combine)";
  m.attr("plan_threads") = kPlanThreads;
  m.attr("num_counters") = static_cast<int>(kNumCounters);

  m.def(
      "decode_plan",
      [](uintptr_t kv_lens, int batch, int num_kv_heads, int num_bins, int min_tiles, int static_splits,
         int max_len, int task_cost, int tail_percent, int tail_bin, int max_tail_bins, uintptr_t tasks, uintptr_t bin_start, uintptr_t bin_first, uintptr_t combine,
         uintptr_t counters, uintptr_t slot_meta, bool pdl, uintptr_t stream, uintptr_t page_table,
         long long page_table_stride, int page_size_log2, uintptr_t bin_first_page, bool head_major,
         bool cut_to_heads, uintptr_t timeline, bool cost_cap) {
        DecodePlanParams p{};
        p.kv_lens = hpc::as_ptr<const int32_t>(kv_lens);
        p.batch = batch;
        p.num_kv_heads = num_kv_heads;
        p.num_bins = num_bins;
        p.min_tiles = min_tiles;
        p.static_splits = static_splits;
        p.max_len = max_len;
        p.task_cost = task_cost;
        p.cost_cap = cost_cap ? 1 : 0;
        p.tail_percent = tail_percent;
        p.tail_bin = tail_bin;
        p.max_tail_bins = max_tail_bins;
        p.tasks = hpc::as_ptr<int4>(tasks);
        p.bin_start = hpc::as_ptr<int32_t>(bin_start);
        p.bin_first = hpc::as_ptr<int4>(bin_first);
        p.combine = hpc::as_ptr<int4>(combine);
        p.counters = hpc::as_ptr<int32_t>(counters);
        p.slot_meta = hpc::as_ptr<int2>(slot_meta);
        p.page_table = hpc::as_ptr<const int32_t>(page_table);  // 0: no first page ids
        p.page_table_stride = page_table_stride;
        p.page_size_log2 = page_size_log2;
        p.bin_first_page = hpc::as_ptr<int32_t>(bin_first_page);
        p.timeline = hpc::as_ptr<uint64_t>(timeline);  // diagnostics; 0 = off
        set_line_order(p, head_major, cut_to_heads);
        HPC_CUDA_CHECK(hpc_attn_launch_decode_plan(p, hpc::as_stream(stream), pdl), "decode_plan");
      },
      py::arg("kv_lens"), py::arg("batch"), py::arg("num_kv_heads"), py::arg("num_bins"), py::arg("min_tiles"),
      py::arg("static_splits"), py::arg("max_len"), py::arg("task_cost"), py::arg("tail_percent"),
      py::arg("tail_bin"), py::arg("max_tail_bins"), py::arg("tasks"), py::arg("bin_start"),
      py::arg("bin_first"), py::arg("combine"),
      py::arg("counters"), py::arg("slot_meta"), py::arg("pdl"), py::arg("stream"), py::arg("page_table") = 0,
      py::arg("page_table_stride") = 0, py::arg("page_size_log2") = 0, py::arg("bin_first_page") = 0,
      py::arg("head_major") = false, py::arg("cut_to_heads") = true, py::arg("timeline") = 0,
      py::arg("cost_cap") = false);

  m.def(
      "paged_decode",
      [](uintptr_t q, long long q_stride_b, long long q_stride_h, bool fp8_q, uintptr_t q_scale,
         long long q_scale_stride_b, long long q_scale_stride_h, uintptr_t k_cache, uintptr_t v_cache, bool fp8_kv,
         long long k_stride_page, long long k_stride_tok, long long k_stride_head, long long v_stride_page,
         long long v_stride_tok, long long v_stride_head, int num_pages, int page_size_log2, uintptr_t page_table,
         long long page_table_stride, uintptr_t tasks, uintptr_t bin_start, uintptr_t bin_first, uintptr_t out,
         long long out_stride_b,
         long long out_stride_h, uintptr_t partial_o, uintptr_t partial_lse, uintptr_t k_scale_ptr,
         uintptr_t v_scale_ptr, float k_scale, float v_scale, float sm_scale_log2, int num_kv_heads, int group,
         int diag, int merge, uintptr_t slot_meta, uintptr_t merge_counts, uintptr_t merge_ml, uintptr_t combine,
         uintptr_t counters, uintptr_t claim_counter, bool tma_producer, int num_ctas, bool pdl, uintptr_t stream,
         uintptr_t timeline, uintptr_t bin_first_page, int bin_heads, int early_kv_tokens) {
        PagedDecodeParams p{};
        p.q = hpc::as_ptr<const void>(q);
        p.q_stride_b = q_stride_b;
        p.q_stride_h = q_stride_h;
        p.q_scale = hpc::as_ptr<const float>(q_scale);
        p.q_scale_stride_b = q_scale_stride_b;
        p.q_scale_stride_h = q_scale_stride_h;
        p.k_cache = hpc::as_ptr<const void>(k_cache);
        p.v_cache = hpc::as_ptr<const void>(v_cache);
        p.k_stride_page = k_stride_page;
        p.k_stride_tok = k_stride_tok;
        p.k_stride_head = k_stride_head;
        p.v_stride_page = v_stride_page;
        p.v_stride_tok = v_stride_tok;
        p.v_stride_head = v_stride_head;
        p.num_pages = num_pages;
        p.page_size_log2 = page_size_log2;
        p.page_table = hpc::as_ptr<const int32_t>(page_table);
        p.page_table_stride = page_table_stride;
        p.tasks = hpc::as_ptr<const int4>(tasks);
        p.bin_start = hpc::as_ptr<const int32_t>(bin_start);
        p.bin_first = hpc::as_ptr<const int4>(bin_first);
        p.bin_first_page = hpc::as_ptr<const int32_t>(bin_first_page);  // 0: read the page table
        p.out = hpc::as_ptr<void>(out);
        p.out_stride_b = out_stride_b;
        p.out_stride_h = out_stride_h;
        p.partial_o = hpc::as_ptr<float>(partial_o);
        p.partial_lse = hpc::as_ptr<float>(partial_lse);
        p.k_scale_ptr = hpc::as_ptr<const float>(k_scale_ptr);
        p.v_scale_ptr = hpc::as_ptr<const float>(v_scale_ptr);
        p.k_scale = k_scale;
        p.v_scale = v_scale;
        p.sm_scale_log2 = sm_scale_log2;
        p.num_kv_heads = num_kv_heads;
        p.group = group;
        p.diag = diag;
        p.bin_heads = bin_heads;
        p.early_kv_tokens = early_kv_tokens;  // <= 0: nothing read before the PDL wait
        p.merge = merge;
        p.slot_meta = hpc::as_ptr<const int2>(slot_meta);
        p.merge_counts = hpc::as_ptr<int>(merge_counts);
        p.merge_ml = hpc::as_ptr<float2>(merge_ml);
        p.combine = hpc::as_ptr<const int4>(combine);
        p.counters = hpc::as_ptr<const int32_t>(counters);
        p.claim_counter = hpc::as_ptr<int>(claim_counter);
        p.timeline = hpc::as_ptr<uint64_t>(timeline);  // diagnostics; 0 = off
        cudaStream_t s = hpc::as_stream(stream);
        // TMA producer when asked for and the driver encodes the caches' layout; otherwise the
        // cp.async producer (same results). Returns which one ran (True: TMA).
        const bool tma = tma_producer && hpc_attn_paged_kv_tensor_maps(p, fp8_kv) == cudaSuccess;
        if (tma) {
          HPC_CUDA_CHECK(fp8_kv ? hpc_attn_launch_paged_decode_tma_fp8kv(p, fp8_q, num_ctas, s, pdl)
                                : hpc_attn_launch_paged_decode_tma_bf16kv(p, fp8_q, num_ctas, s, pdl),
                         "paged_decode (TMA producer)");
        } else {
          HPC_CUDA_CHECK(fp8_kv ? hpc_attn_launch_paged_decode_fp8kv(p, fp8_q, num_ctas, s, pdl)
                                : hpc_attn_launch_paged_decode_bf16kv(p, fp8_q, num_ctas, s, pdl),
                         "paged_decode");
        }
        return tma;
      },
      py::arg("q"), py::arg("q_stride_b"), py::arg("q_stride_h"), py::arg("fp8_q"), py::arg("q_scale"),
      py::arg("q_scale_stride_b"), py::arg("q_scale_stride_h"), py::arg("k_cache"), py::arg("v_cache"),
      py::arg("fp8_kv"), py::arg("k_stride_page"), py::arg("k_stride_tok"), py::arg("k_stride_head"),
      py::arg("v_stride_page"), py::arg("v_stride_tok"), py::arg("v_stride_head"), py::arg("num_pages"),
      py::arg("page_size_log2"), py::arg("page_table"), py::arg("page_table_stride"), py::arg("tasks"),
      py::arg("bin_start"), py::arg("bin_first"), py::arg("out"), py::arg("out_stride_b"), py::arg("out_stride_h"), py::arg("partial_o"),
      py::arg("partial_lse"), py::arg("k_scale_ptr"), py::arg("v_scale_ptr"), py::arg("k_scale"),
      py::arg("v_scale"), py::arg("sm_scale_log2"), py::arg("num_kv_heads"), py::arg("group"), py::arg("diag"),
      py::arg("merge"), py::arg("slot_meta"), py::arg("merge_counts"), py::arg("merge_ml"), py::arg("combine"),
      py::arg("counters"), py::arg("claim_counter"), py::arg("tma_producer"), py::arg("num_ctas"), py::arg("pdl"),
      py::arg("stream"), py::arg("timeline") = 0, py::arg("bin_first_page") = 0, py::arg("bin_heads") = 1,
      py::arg("early_kv_tokens") = 0);

  m.def(
      "decode_combine",
      [](uintptr_t combine, uintptr_t counters, uintptr_t partial_o, uintptr_t partial_lse, uintptr_t out,
         long long out_stride_b, long long out_stride_h, int num_kv_heads, int group, int num_ctas, bool pdl,
         uintptr_t stream) {
        DecodeCombineParams p{};
        p.combine = hpc::as_ptr<const int4>(combine);
        p.counters = hpc::as_ptr<const int32_t>(counters);
        p.partial_o = hpc::as_ptr<const float>(partial_o);
        p.partial_lse = hpc::as_ptr<const float>(partial_lse);
        p.out = hpc::as_ptr<void>(out);
        p.out_stride_b = out_stride_b;
        p.out_stride_h = out_stride_h;
        p.num_kv_heads = num_kv_heads;
        p.group = group;
        HPC_CUDA_CHECK(hpc_attn_launch_decode_combine(p, num_ctas, hpc::as_stream(stream), pdl), "decode_combine");
      },
      py::arg("combine"), py::arg("counters"), py::arg("partial_o"), py::arg("partial_lse"), py::arg("out"),
      py::arg("out_stride_b"), py::arg("out_stride_h"), py::arg("num_kv_heads"), py::arg("group"),
      py::arg("num_ctas"), py::arg("pdl"), py::arg("stream"));
}
