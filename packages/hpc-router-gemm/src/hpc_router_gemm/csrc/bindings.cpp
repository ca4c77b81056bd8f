// Python bindings of hpc_router_gemm: raw pointers, sizes and the stream cross here, no torch
// types (one build serves every torch version).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>

#include "hpc_common/check.h"
#include "hpc_router_gemm/router_gemm_params.h"

namespace py = pybind11;
using std::uintptr_t;

namespace rg = hpc::router_gemm;

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_router_gemm CUDA kernels (BF16 x FP32 router GEMM)";
  m.def("fp32_splitk",
        [](uintptr_t x, int64_t x_stride, uintptr_t w, uintptr_t out, int64_t out_stride, int M, int N, int K,
           int splits, bool l2_prefetch, bool pdl, uintptr_t stream, bool w_evict_first) {
          rg::Fp32SplitKParams p{hpc::as_ptr<const void>(x), x_stride, hpc::as_ptr<const float>(w),
                                 hpc::as_ptr<float>(out), out_stride, M, N, K, splits, l2_prefetch ? 1 : 0,
                                 w_evict_first ? 1 : 0};
          HPC_CUDA_CHECK(rg::run_fp32_splitk(p, hpc::as_stream(stream), pdl), "router_gemm_fp32_splitk");
        },
        py::arg("x"), py::arg("x_stride"), py::arg("w"), py::arg("out"), py::arg("out_stride"), py::arg("M"),
        py::arg("N"), py::arg("K"), py::arg("splits"), py::arg("l2_prefetch"), py::arg("pdl"), py::arg("stream"),
        py::arg("w_evict_first") = false);
  m.def("gemv_fp32",
        [](bool registers, uintptr_t x, int64_t x_stride, uintptr_t w, uintptr_t out, int64_t out_stride, int M,
           int N, int K, int splits, int clusters, bool pdl, uintptr_t stream, bool w_evict_first, int window_rows,
           bool w_no_l1) {
          rg::GemvFp32Params p{hpc::as_ptr<const void>(x), x_stride, hpc::as_ptr<const float>(w),
                               hpc::as_ptr<float>(out), out_stride, M, N, K, splits, clusters, w_evict_first ? 1 : 0,
                               window_rows, w_no_l1 ? 1 : 0};
          if (registers && (window_rows != 0 || w_no_l1)) {
            HPC_CUDA_CHECK(rg::run_gemv_fp32_window(p, hpc::as_stream(stream), pdl), "router_gemv_fp32_window");
          } else if (registers) {
            HPC_CUDA_CHECK(rg::run_gemv_fp32_ldg(p, hpc::as_stream(stream), pdl), "router_gemv_fp32_ldg");
          } else {
            HPC_CUDA_CHECK(rg::run_gemv_fp32(p, hpc::as_stream(stream), pdl), "router_gemv_fp32");
          }
        },
        py::arg("registers"), py::arg("x"), py::arg("x_stride"), py::arg("w"), py::arg("out"), py::arg("out_stride"),
        py::arg("M"), py::arg("N"), py::arg("K"), py::arg("splits"), py::arg("clusters"), py::arg("pdl"),
        py::arg("stream"), py::arg("w_evict_first") = false, py::arg("window_rows") = 0, py::arg("w_no_l1") = false);
  m.def("gemv_max_clusters", &rg::gemv_max_clusters, py::arg("splits"));
  m.def("bf16x2",
        [](int tile, uintptr_t x, int64_t x_stride, uintptr_t w_hi, uintptr_t w_lo, uintptr_t out,
           int64_t out_stride, int M, int N, int K, int splits, bool pdl, uintptr_t stream, int ws_mode,
           uintptr_t ws, uintptr_t counters, int multicast, int prefetch, bool w_evict_first, uintptr_t timeline) {
          rg::Bf16x2Params p{hpc::as_ptr<const void>(x), x_stride, hpc::as_ptr<const void>(w_hi),
                             hpc::as_ptr<const void>(w_lo), hpc::as_ptr<float>(out), out_stride, M, N, K, splits,
                             hpc::as_ptr<float>(ws), hpc::as_ptr<int>(counters), ws_mode, multicast, prefetch,
                             w_evict_first ? 1 : 0, hpc::as_ptr<uint64_t>(timeline)};  // timeline: diagnostics, 0 = off
          HPC_CUDA_CHECK(rg::run_bf16x2(tile, p, hpc::as_stream(stream), pdl), "router_gemm_bf16x2_wgmma");
        },
        py::arg("tile"), py::arg("x"), py::arg("x_stride"), py::arg("w_hi"), py::arg("w_lo"), py::arg("out"),
        py::arg("out_stride"), py::arg("M"), py::arg("N"), py::arg("K"), py::arg("splits"), py::arg("pdl"),
        py::arg("stream"), py::arg("ws_mode") = 0, py::arg("ws") = 0, py::arg("counters") = 0,
        py::arg("multicast") = 0, py::arg("prefetch") = 0, py::arg("w_evict_first") = false,
        py::arg("timeline") = 0);
  m.def("bf16x2_max_clusters", &rg::bf16x2_max_clusters, py::arg("tile"), py::arg("splits"));
  m.def("bf16x2_tile_shape", [](int tile) {
    int bm = 0, bn = 0;
    rg::bf16x2_tile_shape(tile, &bm, &bn);
    return std::make_pair(bm, bn);
  });
}
