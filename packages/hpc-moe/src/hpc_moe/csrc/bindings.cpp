// Python bindings of hpc_moe: raw pointers, sizes and the stream cross here, no torch types
// (one build serves every torch version).
#include <pybind11/pybind11.h>

#include <cstdint>

#include "hpc_common/check.h"
#include "hpc_moe/moe_params.h"

namespace py = pybind11;
using std::uintptr_t;

namespace mo = hpc::moe;

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_moe CUDA kernels (fused MoE: Gate-Up with SiLU*up, Down with the top-k reduce)";
  m.def("gate_up",
        [](int fmt, uintptr_t x, int64_t x_row_bytes, uintptr_t xs, int64_t xs_stride_t, int64_t xs_stride_kb,
           uintptr_t w13, uintptr_t w13s, uintptr_t ids, bool ids_int64, uintptr_t inter, int T, int K, int H, int I,
           int expert_start, int num_local_experts, bool ids_before_wait, uintptr_t down_index, int num_sms, bool pdl,
           uintptr_t stream) {
          mo::GateUpParams p{hpc::as_ptr<const void>(x), x_row_bytes, hpc::as_ptr<const float>(xs), xs_stride_t,
                             xs_stride_kb, hpc::as_ptr<const void>(w13), hpc::as_ptr<const float>(w13s),
                             hpc::as_ptr<const void>(ids), ids_int64 ? 1 : 0, hpc::as_ptr<void>(inter), T, K, H, I,
                             expert_start, num_local_experts, ids_before_wait ? 1 : 0, hpc::as_ptr<int>(down_index)};
          HPC_CUDA_CHECK(mo::run_gate_up(static_cast<mo::Format>(fmt), p, num_sms, hpc::as_stream(stream), pdl),
                         "moe_gate_up");
        },
        py::arg("fmt"), py::arg("x"), py::arg("x_row_bytes"), py::arg("xs"), py::arg("xs_stride_t"),
        py::arg("xs_stride_kb"), py::arg("w13"), py::arg("w13s"), py::arg("ids"), py::arg("ids_int64"),
        py::arg("inter"), py::arg("T"), py::arg("K"), py::arg("H"), py::arg("I"), py::arg("expert_start"),
        py::arg("num_local_experts"), py::arg("ids_before_wait"), py::arg("down_index"), py::arg("num_sms"),
        py::arg("pdl"), py::arg("stream"));
  m.def("down",
        [](int fmt, uintptr_t inter, uintptr_t w2, uintptr_t w2s, uintptr_t ids, bool ids_int64, uintptr_t weights,
           uintptr_t shared, int64_t shared_stride, uintptr_t out, int64_t out_stride, int T, int K, int H, int I,
           int expert_start, int num_local_experts, int chunk_tokens, bool prefetch_w2, int expert_splits, uintptr_t y,
           bool pdl, uintptr_t stream) {
          mo::DownParams p{hpc::as_ptr<const void>(inter), hpc::as_ptr<const void>(w2), hpc::as_ptr<const float>(w2s),
                           hpc::as_ptr<const void>(ids), ids_int64 ? 1 : 0, hpc::as_ptr<const float>(weights),
                           hpc::as_ptr<const void>(shared), shared_stride, hpc::as_ptr<void>(out), out_stride,
                           T, K, H, I, expert_start, num_local_experts, chunk_tokens, prefetch_w2 ? 1 : 0,
                           expert_splits, hpc::as_ptr<void>(y)};
          HPC_CUDA_CHECK(mo::run_down(static_cast<mo::Format>(fmt), p, hpc::as_stream(stream), pdl), "moe_down");
        },
        py::arg("fmt"), py::arg("inter"), py::arg("w2"), py::arg("w2s"), py::arg("ids"), py::arg("ids_int64"),
        py::arg("weights"), py::arg("shared"), py::arg("shared_stride"), py::arg("out"), py::arg("out_stride"),
        py::arg("T"), py::arg("K"), py::arg("H"), py::arg("I"), py::arg("expert_start"),
        py::arg("num_local_experts"), py::arg("chunk_tokens"), py::arg("prefetch_w2"), py::arg("expert_splits"),
        py::arg("y"), py::arg("pdl"), py::arg("stream"));
  m.def("down_experts",
        [](int fmt, uintptr_t inter, uintptr_t w2, uintptr_t w2s, uintptr_t index, uintptr_t y, int cap, int H, int I,
           int num_local_experts, int tiles_per_warp, int slab_pairs, int task_bound, bool pdl, uintptr_t stream) {
          mo::DownExpertParams p{hpc::as_ptr<const void>(inter), hpc::as_ptr<const void>(w2),
                                 hpc::as_ptr<const float>(w2s), hpc::as_ptr<const int>(index), hpc::as_ptr<void>(y),
                                 cap, H, I, num_local_experts, tiles_per_warp, slab_pairs, task_bound};
          HPC_CUDA_CHECK(mo::run_down_experts(static_cast<mo::Format>(fmt), p, hpc::as_stream(stream), pdl),
                         "moe_down_experts");
        },
        py::arg("fmt"), py::arg("inter"), py::arg("w2"), py::arg("w2s"), py::arg("index"), py::arg("y"),
        py::arg("cap"), py::arg("H"), py::arg("I"), py::arg("num_local_experts"), py::arg("tiles_per_warp"),
        py::arg("slab_pairs"), py::arg("task_bound"), py::arg("pdl"), py::arg("stream"));
  m.def("topk_reduce",
        [](uintptr_t y, uintptr_t ids, bool ids_int64, uintptr_t weights, uintptr_t shared, int64_t shared_stride,
           uintptr_t out, int64_t out_stride, int T, int K, int H, int expert_start, int num_local_experts, bool pdl,
           uintptr_t stream) {
          mo::TopkReduceParams p{hpc::as_ptr<const void>(y), hpc::as_ptr<const void>(ids), ids_int64 ? 1 : 0,
                                 hpc::as_ptr<const float>(weights), hpc::as_ptr<const void>(shared), shared_stride,
                                 hpc::as_ptr<void>(out), out_stride, T, K, H, expert_start, num_local_experts};
          HPC_CUDA_CHECK(mo::run_topk_reduce(p, hpc::as_stream(stream), pdl), "moe_topk_reduce");
        },
        py::arg("y"), py::arg("ids"), py::arg("ids_int64"), py::arg("weights"), py::arg("shared"),
        py::arg("shared_stride"), py::arg("out"), py::arg("out_stride"), py::arg("T"), py::arg("K"), py::arg("H"),
        py::arg("expert_start"), py::arg("num_local_experts"), py::arg("pdl"), py::arg("stream"));
}
