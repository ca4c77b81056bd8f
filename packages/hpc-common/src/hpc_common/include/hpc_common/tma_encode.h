// Host-side TMA tensor-map encoding shared by the operators: the driver's cuTensorMapEncodeTiled
// reached through the runtime's driver entry point, so no extension links -lcuda (the runtime
// hands us the function of the installed driver). Host code only; include from .cu/.cpp files.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace hpc::tma {

// The encoder of the installed driver, or nullptr when the driver has none (too old).
inline PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // leave no sticky error for the caller's next launch check
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Tiled tensor map of `rank` dimensions, innermost first: dims[i] elements, strides_bytes[i]
// the byte pitch of dimension i + 1 (rank - 1 values, each a multiple of 16), box[i] elements
// per copy. Unit element strides, no interleave, zero fill out of bounds. Returns
// cudaErrorNotSupported without a driver encoder, cudaErrorInvalidValue when the driver
// rejects the layout (alignment, box or stride limits).
inline cudaError_t encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, uint32_t rank, const void* ptr,
                                const uint64_t* dims, const uint64_t* strides_bytes, const uint32_t* box,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  auto fn = encoder();
  if (fn == nullptr) return cudaErrorNotSupported;
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], e[5];
  if (rank < 1 || rank > 5) return cudaErrorInvalidValue;
  for (uint32_t i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    e[i] = 1;
    if (i + 1 < rank) s[i] = strides_bytes[i];
  }
  CUresult r = fn(map, dtype, rank, const_cast<void*>(ptr), d, s, b, e, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                  promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace hpc::tma
