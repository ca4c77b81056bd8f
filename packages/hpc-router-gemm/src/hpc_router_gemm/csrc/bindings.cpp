// Python bindings of hpc_router_gemm: each launcher takes its plain parameter struct
// (router_gemm_params.h), filled field by field from Python with pointers as integers, plus the
// stream; no torch types cross here (one build serves every torch version).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>

#include "hpc_common/bind_params.h"
#include "hpc_common/check.h"
#include "hpc_router_gemm/router_gemm_params.h"

namespace py = pybind11;
using std::uintptr_t;

namespace rg = hpc::router_gemm;

// The fields every launcher shares: x [M, K] BF16, w, out [M, N] FP32, sizes, split, weight policy.
template <class S>
void common_fields(py::class_<S>& c) {
  HPC_BIND_PTR_FIELD(c, S, x, const void);
  HPC_BIND_PTR_FIELD(c, S, out, float);
  c.def(py::init([] { return S{}; }))
      .def_readwrite("x_stride", &S::x_stride)
      .def_readwrite("out_stride", &S::out_stride)
      .def_readwrite("M", &S::M)
      .def_readwrite("N", &S::N)
      .def_readwrite("K", &S::K)
      .def_readwrite("splits", &S::splits)
      .def_readwrite("w_evict_first", &S::w_evict_first);
}

// The gemv kernels (GemvKind in router_gemm.py): bulk copies through shared memory, the one-token
// register kernel, and the same with a 2-row window per thread.
enum GemvKind : int { kGemvBulk = 0, kGemvRegisters = 1, kGemvWindow = 2 };

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_router_gemm CUDA kernels (BF16 x FP32 router GEMM)";

  py::class_<rg::Fp32SplitKParams> fp32(m, "Fp32SplitKParams");
  common_fields(fp32);
  HPC_BIND_PTR_FIELD(fp32, rg::Fp32SplitKParams, w, const float);
  fp32.def_readwrite("l2_prefetch", &rg::Fp32SplitKParams::l2_prefetch);

  py::class_<rg::GemvFp32Params> gemv(m, "GemvFp32Params");
  common_fields(gemv);
  HPC_BIND_PTR_FIELD(gemv, rg::GemvFp32Params, w, const float);
  gemv.def_readwrite("clusters", &rg::GemvFp32Params::clusters);

  py::class_<rg::Bf16x2Params> bf16x2(m, "Bf16x2Params");
  common_fields(bf16x2);
  HPC_BIND_PTR_FIELD(bf16x2, rg::Bf16x2Params, w_hi, const void);
  HPC_BIND_PTR_FIELD(bf16x2, rg::Bf16x2Params, w_lo, const void);
  HPC_BIND_PTR_FIELD(bf16x2, rg::Bf16x2Params, ws, float);
  HPC_BIND_PTR_FIELD(bf16x2, rg::Bf16x2Params, counters, int);
  bf16x2.def_readwrite("ws_mode", &rg::Bf16x2Params::ws_mode)
      .def_readwrite("multicast", &rg::Bf16x2Params::multicast)
      .def_readwrite("prefetch", &rg::Bf16x2Params::prefetch);

  m.def(
      "fp32_splitk",
      [](const rg::Fp32SplitKParams& p, bool pdl, uintptr_t stream) {
        HPC_CUDA_CHECK(rg::run_fp32_splitk(p, hpc::as_stream(stream), pdl), "router_gemm_fp32_splitk");
      },
      py::arg("params"), py::arg("pdl"), py::arg("stream"));
  m.def(
      "gemv_fp32",
      [](int kind, const rg::GemvFp32Params& p, bool pdl, uintptr_t stream) {
        const cudaStream_t s = hpc::as_stream(stream);
        switch (kind) {
          case kGemvBulk:
            HPC_CUDA_CHECK(rg::run_gemv_fp32(p, s, pdl), "router_gemv_fp32");
            break;
          case kGemvRegisters:
            HPC_CUDA_CHECK(rg::run_gemv_fp32_ldg(p, s, pdl), "router_gemv_fp32_ldg");
            break;
          case kGemvWindow:
            HPC_CUDA_CHECK(rg::run_gemv_fp32_window(p, s, pdl), "router_gemv_fp32_window");
            break;
          default:
            throw py::value_error("gemv_fp32: unknown kernel kind");
        }
      },
      py::arg("kind"), py::arg("params"), py::arg("pdl"), py::arg("stream"));
  m.def("gemv_max_clusters", &rg::gemv_max_clusters, py::arg("splits"));
  m.def(
      "bf16x2",
      [](int tile, const rg::Bf16x2Params& p, bool pdl, uintptr_t stream) {
        HPC_CUDA_CHECK(rg::run_bf16x2(tile, p, hpc::as_stream(stream), pdl), "router_gemm_bf16x2_wgmma");
      },
      py::arg("tile"), py::arg("params"), py::arg("pdl"), py::arg("stream"));
  m.def("bf16x2_max_clusters", &rg::bf16x2_max_clusters, py::arg("tile"), py::arg("splits"));
  m.def("bf16x2_tile_shape", [](int tile) {
    int bm = 0, bn = 0;
    rg::bf16x2_tile_shape(tile, &bm, &bn);
    return std::make_pair(bm, bn);
  });
}
