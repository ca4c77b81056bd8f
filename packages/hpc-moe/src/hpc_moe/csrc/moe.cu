// The instantiated fused-MoE kernels (one per weight format) and their C entry points, used by
// bindings.cpp. Grid sizes come from host integers only (T, K, E_local, I, the SM count), never
// from device data, so a captured graph replays with new routing.
#include <algorithm>

#include "hpc_moe/moe_down.cuh"
#include "hpc_moe/moe_down_experts.cuh"
#include "hpc_moe/moe_gate_up.cuh"
#include "hpc_moe/moe_params.h"
#include "hpc_moe/moe_topk_reduce.cuh"

namespace hpc::moe {

// The grid is an upper bound on the tasks any routing can make (I/8 tiles per active expert),
// capped by the launcher at the CTAs resident at once.
cudaError_t run_gate_up(Format f, const GateUpParams& p, int num_sms, cudaStream_t stream, bool pdl) {
  const long long tasks = static_cast<long long>(p.I / 8) * std::min(p.num_local_experts, p.T * p.K);
  const int bound = static_cast<int>(std::max(1LL, std::min(tasks, 1LL << 30)));
  return f == Format::kFp8 ? launch_moe_gate_up<Format::kFp8>(p, bound, num_sms, stream, pdl)
                           : launch_moe_gate_up<Format::kBf16>(p, bound, num_sms, stream, pdl);
}

cudaError_t run_down(Format f, const DownParams& p, cudaStream_t stream, bool pdl) {
  return f == Format::kFp8 ? launch_moe_down<Format::kFp8>(p, stream, pdl)
                           : launch_moe_down<Format::kBf16>(p, stream, pdl);
}

cudaError_t run_down_experts(Format f, const DownExpertParams& p, cudaStream_t stream, bool pdl) {
  return f == Format::kFp8 ? launch_moe_down_experts<Format::kFp8>(p, stream, pdl)
                           : launch_moe_down_experts<Format::kBf16>(p, stream, pdl);
}

cudaError_t run_topk_reduce(const TopkReduceParams& p, cudaStream_t stream, bool pdl) {
  return launch_moe_topk_reduce(p, stream, pdl);
}

}  // namespace hpc::moe
