// Python bindings of hpc_common's kernels: raw pointers, sizes and the stream cross here,
// no torch types (so one build serves every torch version).
#include <pybind11/pybind11.h>

#include <cstdint>

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
  m.def(
      "fp8_quant",
      [](uintptr_t x, uintptr_t q, uintptr_t scale, uintptr_t static_scale, float static_value,
         uintptr_t workspace, int64_t rows, int64_t heads, int64_t row_len, int64_t seg_len,
         int64_t segs_per_row, int64_t x_stride_t, int64_t x_stride_h, int64_t q_stride_t,
         int64_t q_stride_h, int64_t scale_stride_row, int64_t scale_stride_seg, int dtype,
         int scale_source, bool per_tensor_dynamic, bool ue8m0, bool vectorized, bool short_segments, int num_sms, bool pdl,
         uintptr_t stream, bool bulk, bool peel, bool flat_amax, int bulk_variant, uintptr_t timeline, bool tile) {
        hpc::fp8::QuantParams p{};
        p.x = hpc::as_ptr<const void>(x);
        p.q = hpc::as_ptr<uint8_t>(q);
        p.scale = hpc::as_ptr<float>(scale);
        p.static_scale = hpc::as_ptr<const float>(static_scale);
        p.static_value = static_value;
        p.workspace = hpc::as_ptr<uint32_t>(workspace);
        p.rows = rows;
        p.heads = heads;
        p.row_len = row_len;
        p.seg_len = seg_len;
        p.segs_per_row = segs_per_row;
        p.x_stride_t = x_stride_t;
        p.x_stride_h = x_stride_h;
        p.q_stride_t = q_stride_t;
        p.q_stride_h = q_stride_h;
        p.scale_stride_row = scale_stride_row;
        p.scale_stride_seg = scale_stride_seg;
        p.dtype = dtype;
        p.scale_source = scale_source;
        p.per_tensor_dynamic = per_tensor_dynamic;
        p.ue8m0 = ue8m0;
        p.vectorized = vectorized;
        p.short_segments = short_segments;
        p.bulk = bulk;
        p.tile = tile;
        p.peel = peel;
        p.flat_amax = flat_amax;
        p.num_sms = num_sms;
        hpc::fp8::BulkOptions opt;
        opt.variant = bulk_variant;
        opt.timeline = hpc::as_ptr<unsigned long long>(timeline);
        HPC_CUDA_CHECK(launch_fp8_quant(p, hpc::as_stream(stream), pdl, opt), "fp8_quant");
      },
      py::arg("x"), py::arg("q"), py::arg("scale"), py::arg("static_scale"), py::arg("static_value"),
      py::arg("workspace"), py::arg("rows"), py::arg("heads"), py::arg("row_len"), py::arg("seg_len"),
      py::arg("segs_per_row"), py::arg("x_stride_t"), py::arg("x_stride_h"), py::arg("q_stride_t"),
      py::arg("q_stride_h"), py::arg("scale_stride_row"), py::arg("scale_stride_seg"), py::arg("dtype"),
      py::arg("scale_source"), py::arg("per_tensor_dynamic"), py::arg("ue8m0"), py::arg("vectorized"), py::arg("short_segments"),
      py::arg("num_sms"), py::arg("pdl"), py::arg("stream"), py::arg("bulk") = false, py::arg("peel") = false,
      py::arg("flat_amax") = false, py::arg("bulk_variant") = 0, py::arg("timeline") = 0, py::arg("tile") = false);
}
