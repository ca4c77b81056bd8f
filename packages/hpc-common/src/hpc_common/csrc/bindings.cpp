// Python bindings of hpc_common's kernels: raw pointers, sizes and the stream cross here,
// no torch types (so one build serves every torch version).
#include <pybind11/pybind11.h>

#include <cstdint>

#include "hpc_common/check.h"

namespace py = pybind11;
using std::uintptr_t;

cudaError_t launch_pdl_chain(const float* x, float* y, float* z, int n, int spin, bool pdl,
                             cudaStream_t stream);

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "hpc_common CUDA kernels (FP8 quantisation, PDL self-test)";
  m.def("pdl_chain", [](uintptr_t x, uintptr_t y, uintptr_t z, int n, int spin, bool pdl, uintptr_t stream) {
    HPC_CUDA_CHECK(launch_pdl_chain(hpc::as_ptr<const float>(x), hpc::as_ptr<float>(y), hpc::as_ptr<float>(z),
                                    n, spin, pdl, hpc::as_stream(stream)),
                   "pdl_chain");
  });
}
