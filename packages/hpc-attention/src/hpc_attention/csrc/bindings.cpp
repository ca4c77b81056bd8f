// Python bindings of hpc_attention: the three params structs of decode_params.h and PrologueParams of
// prologue_params.h field by field, and the host entry points of decode_api.h and prologue_params.h.
// Raw pointers (as ints), sizes and the stream cross here, no torch types; hpc_attention/_ops.py and
// hpc_attention/prologue.py fill the structs from their tensors.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <type_traits>

#include "hpc_attention/decode_api.h"
#include "hpc_attention/prologue_params.h"
#include "hpc_common/check.h"

namespace py = pybind11;
using std::uintptr_t;
using namespace hpc::attn;

namespace {

// A struct member as a Python attribute: pointers as ints (data_ptr()), everything else as itself.
template <class S, class T>
void field(py::class_<S>& c, const char* name, T S::*m) {
  if constexpr (std::is_pointer_v<T>) {
    c.def_property(
        name, [m](const S& s) { return reinterpret_cast<uintptr_t>(s.*m); },
        [m](S& s, uintptr_t v) { s.*m = reinterpret_cast<T>(v); });
  } else {
    c.def_readwrite(name, m);
  }
}

#define HPC_FIELD(cls, name) field(cls, #name, &std::remove_reference_t<decltype(cls)>::type::name)

}  // namespace

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_attention CUDA kernels (decode planner, decode, combine, fused prologue)";
  m.attr("plan_threads") = kPlanThreads;
  m.attr("num_counters") = static_cast<int>(kNumCounters);

  py::class_<DecodePlanParams> plan(m, "DecodePlanParams");
  plan.def(py::init([] { return DecodePlanParams{}; }));
  HPC_FIELD(plan, kv_lens);
  HPC_FIELD(plan, batch);
  HPC_FIELD(plan, num_kv_heads);
  HPC_FIELD(plan, num_bins);
  HPC_FIELD(plan, min_tiles);
  HPC_FIELD(plan, static_splits);
  HPC_FIELD(plan, max_len);
  HPC_FIELD(plan, task_cost);
  HPC_FIELD(plan, cost_cap);
  HPC_FIELD(plan, tail_percent);
  HPC_FIELD(plan, tail_bin);
  HPC_FIELD(plan, max_tail_bins);
  HPC_FIELD(plan, tasks);
  HPC_FIELD(plan, bin_start);
  HPC_FIELD(plan, bin_first);
  HPC_FIELD(plan, combine);
  HPC_FIELD(plan, counters);
  HPC_FIELD(plan, slot_meta);
  HPC_FIELD(plan, page_table);
  HPC_FIELD(plan, page_table_stride);
  HPC_FIELD(plan, page_size_log2);
  HPC_FIELD(plan, bin_first_page);

  py::class_<DecodeParams> dec(m, "DecodeParams");
  dec.def(py::init([] { return DecodeParams{}; }));
  HPC_FIELD(dec, q);
  HPC_FIELD(dec, q_stride_b);
  HPC_FIELD(dec, q_stride_h);
  HPC_FIELD(dec, q_scale);
  HPC_FIELD(dec, q_scale_stride_b);
  HPC_FIELD(dec, q_scale_stride_h);
  HPC_FIELD(dec, k_cache);
  HPC_FIELD(dec, v_cache);
  HPC_FIELD(dec, k_stride_page);
  HPC_FIELD(dec, k_stride_tok);
  HPC_FIELD(dec, k_stride_head);
  HPC_FIELD(dec, v_stride_page);
  HPC_FIELD(dec, v_stride_tok);
  HPC_FIELD(dec, v_stride_head);
  HPC_FIELD(dec, num_pages);
  HPC_FIELD(dec, page_size_log2);
  HPC_FIELD(dec, page_table);
  HPC_FIELD(dec, page_table_stride);
  HPC_FIELD(dec, tasks);
  HPC_FIELD(dec, bin_start);
  HPC_FIELD(dec, bin_first);
  HPC_FIELD(dec, bin_first_page);
  HPC_FIELD(dec, out);
  HPC_FIELD(dec, out_stride_b);
  HPC_FIELD(dec, out_stride_h);
  HPC_FIELD(dec, partial_o);
  HPC_FIELD(dec, partial_lse);
  HPC_FIELD(dec, merge);
  HPC_FIELD(dec, slot_meta);
  HPC_FIELD(dec, merge_counts);
  HPC_FIELD(dec, combine);
  HPC_FIELD(dec, counters);
  HPC_FIELD(dec, claim_counter);
  HPC_FIELD(dec, k_scale_ptr);
  HPC_FIELD(dec, v_scale_ptr);
  HPC_FIELD(dec, k_scale);
  HPC_FIELD(dec, v_scale);
  HPC_FIELD(dec, sm_scale_log2);
  HPC_FIELD(dec, num_kv_heads);
  HPC_FIELD(dec, group);
  HPC_FIELD(dec, bin_heads);
  HPC_FIELD(dec, early_kv_tokens);

  m.def(
      "decode_plan",
      [](const DecodePlanParams& p, bool head_major, bool cut_to_heads, bool pdl, uintptr_t stream) {
        HPC_CUDA_CHECK(run_decode_plan(p, head_major, cut_to_heads, hpc::as_stream(stream), pdl), "decode_plan");
      },
      py::arg("params"), py::arg("head_major"), py::arg("cut_to_heads"), py::arg("pdl"), py::arg("stream"));

  m.def(
      "decode",
      [](const DecodeParams& p, bool fp8_kv, bool fp8_q, bool tma, int num_ctas, int combine_ctas, bool pdl,
         uintptr_t stream) {
        DecodeLaunch l;
        l.fp8_kv = fp8_kv;
        l.fp8_q = fp8_q;
        l.tma = tma;
        l.num_ctas = num_ctas;
        l.combine_ctas = combine_ctas;
        l.pdl = pdl;
        l.stream = hpc::as_stream(stream);
        HPC_CUDA_CHECK(run_decode(p, l), l.tma ? "decode (TMA producer)" : "decode");
      },
      py::arg("params"), py::arg("fp8_kv"), py::arg("fp8_q"), py::arg("tma"), py::arg("num_ctas"),
      py::arg("combine_ctas"), py::arg("pdl"), py::arg("stream"));

  // The fused prologue (prologue_params.h).
  py::class_<PrologueParams> pro(m, "PrologueParams");
  pro.def(py::init([] { return PrologueParams{}; }));
  HPC_FIELD(pro, qkv);
  HPC_FIELD(pro, qkv_stride_t);
  HPC_FIELD(pro, positions);
  HPC_FIELD(pro, cos_sin);
  HPC_FIELD(pro, cos_sin_stride);
  HPC_FIELD(pro, q_norm_weight);
  HPC_FIELD(pro, k_norm_weight);
  HPC_FIELD(pro, slot_mapping);
  HPC_FIELD(pro, q_out);
  HPC_FIELD(pro, q_stride_t);
  HPC_FIELD(pro, q_stride_h);
  HPC_FIELD(pro, q_scale);
  HPC_FIELD(pro, q_scale_stride_t);
  HPC_FIELD(pro, q_scale_stride_h);
  HPC_FIELD(pro, k_cache);
  HPC_FIELD(pro, v_cache);
  HPC_FIELD(pro, k_stride_page);
  HPC_FIELD(pro, k_stride_tok);
  HPC_FIELD(pro, k_stride_head);
  HPC_FIELD(pro, v_stride_page);
  HPC_FIELD(pro, v_stride_tok);
  HPC_FIELD(pro, v_stride_head);
  HPC_FIELD(pro, num_slots);
  HPC_FIELD(pro, page_size);
  HPC_FIELD(pro, k_scale_ptr);
  HPC_FIELD(pro, v_scale_ptr);
  HPC_FIELD(pro, k_scale);
  HPC_FIELD(pro, v_scale);
  HPC_FIELD(pro, num_tokens);
  HPC_FIELD(pro, num_qo_heads);
  HPC_FIELD(pro, num_kv_heads);
  HPC_FIELD(pro, max_pos);
  HPC_FIELD(pro, rotary_dim);
  HPC_FIELD(pro, neox);
  HPC_FIELD(pro, eps);
  HPC_FIELD(pro, positions_i64);
  HPC_FIELD(pro, slots_i64);
  HPC_FIELD(pro, cos_sin_f32);
  HPC_FIELD(pro, norm_f32);
  HPC_FIELD(pro, cos_sin_vec);

  m.def(
      "qk_norm_rope_store",
      [](const PrologueParams& p, bool fp8_kv, bool fp8_q, bool pdl, uintptr_t stream) {
        HPC_CUDA_CHECK(run_qk_norm_rope_store(p, fp8_kv, fp8_q, hpc::as_stream(stream), pdl), "qk_norm_rope_store");
      },
      py::arg("params"), py::arg("fp8_kv"), py::arg("fp8_q"), py::arg("pdl"), py::arg("stream"));
}
