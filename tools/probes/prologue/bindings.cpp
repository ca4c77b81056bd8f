// Python bindings of the prologue probe's kernels (bound_kernels.cu): raw pointers as ints, sizes, the stream.
// Only for tools/probes/prologue/prologue_bound.py, which fills the arguments from its tensors.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "hpc_attention/prologue_params.h"

namespace py = pybind11;
using hpc::attn::PrologueParams;

namespace probe {
cudaError_t run_bare_copy(const PrologueParams& p, int rows_per_team, bool fp8, unsigned mix, cudaStream_t stream,
                          bool pdl);
int bare_copy_registers(int rows_per_team, bool fp8);
cudaError_t run_empty(int blocks, cudaStream_t stream, bool pdl);
}  // namespace probe

namespace {

template <class T>
T* ptr(std::uintptr_t v) {
  return reinterpret_cast<T*>(v);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Caches are contiguous [num_pages, page_size, Hkv, 128]; Q is [T, Hq, 128] and its scales [T, Hq]; ids int64,
// cos / sin FP32 [max_pos, rotary_dim] (what the probe allocates).
void bare_copy(std::uintptr_t qkv, std::uintptr_t positions, std::uintptr_t cos_sin, std::uintptr_t slot_mapping,
               std::uintptr_t q_out, std::uintptr_t q_scale, std::uintptr_t k_cache, std::uintptr_t v_cache,
               long long num_tokens, int num_qo_heads, int num_kv_heads, int rotary_dim, int page_size,
               long long num_pages, int rows_per_team, bool fp8, unsigned mix, std::uintptr_t stream, bool pdl) {
  PrologueParams p{};
  p.qkv = ptr<const void>(qkv);
  p.qkv_stride_t = static_cast<long long>(num_qo_heads + 2 * num_kv_heads) * hpc::attn::kPrologueHeadDim;
  p.positions = ptr<const void>(positions);
  p.positions_i64 = 1;
  p.cos_sin = ptr<const void>(cos_sin);
  p.cos_sin_stride = rotary_dim;
  p.cos_sin_f32 = 1;
  p.rotary_dim = rotary_dim;
  p.slot_mapping = ptr<const void>(slot_mapping);
  p.slots_i64 = 1;
  p.q_out = ptr<void>(q_out);
  p.q_stride_h = hpc::attn::kPrologueHeadDim;
  p.q_stride_t = static_cast<long long>(num_qo_heads) * p.q_stride_h;
  p.q_scale = ptr<float>(q_scale);
  p.q_scale_stride_t = num_qo_heads;
  p.q_scale_stride_h = 1;
  p.k_cache = ptr<void>(k_cache);
  p.v_cache = ptr<void>(v_cache);
  p.k_stride_head = p.v_stride_head = hpc::attn::kPrologueHeadDim;
  p.k_stride_tok = p.v_stride_tok = static_cast<long long>(num_kv_heads) * p.k_stride_head;
  p.k_stride_page = p.v_stride_page = page_size * p.k_stride_tok;
  p.page_size = page_size;
  p.num_slots = num_pages * page_size;
  p.num_tokens = num_tokens;
  p.num_qo_heads = num_qo_heads;
  p.num_kv_heads = num_kv_heads;
  check(probe::run_bare_copy(p, rows_per_team, fp8, mix, ptr<CUstream_st>(stream), pdl), "bare_copy");
}

}  // namespace

PYBIND11_MODULE(HPC_EXT_NAME, m) {
  m.doc() = "prologue probe kernels: a bare copy of the fused prologue's bytes, an empty kernel";
  m.def("bare_copy", &bare_copy, py::arg("qkv"), py::arg("positions"), py::arg("cos_sin"), py::arg("slot_mapping"),
        py::arg("q_out"), py::arg("q_scale"), py::arg("k_cache"), py::arg("v_cache"), py::arg("num_tokens"),
        py::arg("num_qo_heads"), py::arg("num_kv_heads"), py::arg("rotary_dim"), py::arg("page_size"),
        py::arg("num_pages"), py::arg("rows_per_team"), py::arg("fp8"), py::arg("mix"), py::arg("stream"),
        py::arg("pdl"));
  m.def("bare_copy_registers", &probe::bare_copy_registers, py::arg("rows_per_team"), py::arg("fp8"));
  m.def("empty", [](int blocks, std::uintptr_t stream, bool pdl) {
    check(probe::run_empty(blocks, ptr<CUstream_st>(stream), pdl), "empty");
  }, py::arg("blocks"), py::arg("stream"), py::arg("pdl"));
}
