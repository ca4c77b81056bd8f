// Python bindings of hpc_common's kernels: raw pointers, sizes and the stream cross here,
// no torch types (so one build serves every torch version).
#include <pybind11/pybind11.h>

#include <cstdint>

#include "hpc_common/bind_params.h"
#include "hpc_common/check.h"
#include "hpc_common/fp8_quant.cuh"

namespace py = pybind11;
using std::uintptr_t;

cudaError_t launch_pdl_chain(const float* x, float* y, float* z, int n, int spin, bool pdl,
                             cudaStream_t stream);
int smem_opt_in_floats();
cudaError_t launch_smem_opt_in(const float* x, float* y, cudaStream_t stream);

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_common CUDA kernels (FP8 quantisation, launch self-tests)";
  m.def("pdl_chain", [](uintptr_t x, uintptr_t y, uintptr_t z, int n, int spin, bool pdl, uintptr_t stream) {
    HPC_CUDA_CHECK(launch_pdl_chain(hpc::as_ptr<const float>(x), hpc::as_ptr<float>(y), hpc::as_ptr<float>(z),
                                    n, spin, pdl, hpc::as_stream(stream)),
                   "pdl_chain");
  });
  m.attr("SMEM_OPT_IN_FLOATS") = smem_opt_in_floats();
  m.def("smem_opt_in", [](uintptr_t x, uintptr_t y, uintptr_t stream) {
    HPC_CUDA_CHECK(launch_smem_opt_in(hpc::as_ptr<const float>(x), hpc::as_ptr<float>(y), hpc::as_stream(stream)),
                   "smem_opt_in_kernel");
  });

  m.attr("FP8_AMAX_BLOCKS_PER_SM") = hpc::fp8::kAmaxBlocksPerSm;
  m.attr("FP8_AMAX_FLOOR") = hpc::fp8::kAmaxFloor;
  // The launcher's parameter struct, filled field by field from Python (hpc_common.fp8.quant): pointers
  // as integers, the rest as they are in fp8_quant_params.h. Fields the launcher derives stay zero.
  using hpc::fp8::QuantParams;
  py::class_<QuantParams> qp(m, "QuantParams");
  qp.def(py::init([] { return QuantParams{}; }));
  HPC_BIND_PTR_FIELD(qp, QuantParams, x, const void);
  HPC_BIND_PTR_FIELD(qp, QuantParams, q, uint8_t);
  HPC_BIND_PTR_FIELD(qp, QuantParams, scale, float);
  HPC_BIND_PTR_FIELD(qp, QuantParams, static_scale, const float);
  HPC_BIND_PTR_FIELD(qp, QuantParams, workspace, uint32_t);
  qp.def_readwrite("static_value", &QuantParams::static_value)
      .def_readwrite("rows", &QuantParams::rows)
      .def_readwrite("heads", &QuantParams::heads)
      .def_readwrite("row_len", &QuantParams::row_len)
      .def_readwrite("seg_len", &QuantParams::seg_len)
      .def_readwrite("segs_per_row", &QuantParams::segs_per_row)
      .def_readwrite("x_stride_t", &QuantParams::x_stride_t)
      .def_readwrite("x_stride_h", &QuantParams::x_stride_h)
      .def_readwrite("q_stride_t", &QuantParams::q_stride_t)
      .def_readwrite("q_stride_h", &QuantParams::q_stride_h)
      .def_readwrite("scale_stride_row", &QuantParams::scale_stride_row)
      .def_readwrite("scale_stride_seg", &QuantParams::scale_stride_seg)
      .def_readwrite("dtype", &QuantParams::dtype)
      .def_readwrite("scale_source", &QuantParams::scale_source)
      .def_readwrite("per_tensor_dynamic", &QuantParams::per_tensor_dynamic)
      .def_readwrite("ue8m0", &QuantParams::ue8m0)
      .def_readwrite("vectorized", &QuantParams::vectorized)
      .def_readwrite("peel", &QuantParams::peel)
      .def_readwrite("num_sms", &QuantParams::num_sms);
  m.def(
      "fp8_quant",
      [](const QuantParams& p, bool pdl, uintptr_t stream) {
        HPC_CUDA_CHECK(launch_fp8_quant(p, hpc::as_stream(stream), pdl), "fp8_quant");
      },
      py::arg("params"), py::arg("pdl"), py::arg("stream"));
}
