// The instantiated router GEMM kernels and their C entry points (used by bindings.cpp).
// Three tensor-core tiles keep the build short: NARROW for skinny M (64 x 32 tiles, many CTAs
// to spread the weight read), WIDE (128 x 192, the most reuse the register file allows with two
// accumulators) and WIDE96 (128 x 96: twice the tiles of WIDE, so large M fills the GPU with
// 2-CTA clusters, which always fit a TPC, instead of 4- or 8-CTA clusters, which leave waves).
// WIDE96_RS and WIDE_RS: the same tiles with the x fragments in registers (one shared-memory
// read of the x tile per K block for both products; HISTORY.md, fourth session).
// WIDE96_F and WIDE96_RSF: WIDE96 and WIDE96_RS with both products in one m64n192k16 wgmma per K
// step (twelfth session); WIDE96_F4: WIDE96_F with a 4-stage ring (Lite's large-M rows).
#include "hpc_router_gemm/router_gemm_bf16x2_wgmma.cuh"
#include "hpc_router_gemm/router_gemm_fp32_splitk.cuh"
#include "hpc_router_gemm/router_gemv_fp32.cuh"
#include "hpc_router_gemm/router_gemv_fp32_ldg.cuh"
#include "hpc_router_gemm/router_gemv_fp32_window.cuh"

namespace hpc::router_gemm {

using Narrow = Bf16x2Config<32, 1, 6>;
using Wide = Bf16x2Config<192, 2, 3>;
using Wide96 = Bf16x2Config<96, 2, 5>;
using Wide96Rs = Bf16x2Config<96, 2, 5, true>;
using WideRs = Bf16x2Config<192, 2, 3, true>;
using Wide96F = Bf16x2Config<96, 2, 5, false, true>;
using Wide96RsF = Bf16x2Config<96, 2, 5, true, true>;
using Wide96F4 = Bf16x2Config<96, 2, 4, false, true>;

cudaError_t run_fp32_splitk(const Fp32SplitKParams& p, cudaStream_t stream, bool pdl) {
  return launch_router_gemm_fp32_splitk(p, stream, pdl);
}

cudaError_t run_gemv_fp32(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  return launch_router_gemv_fp32(p, stream, pdl);
}

cudaError_t run_gemv_fp32_ldg(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  return launch_router_gemv_fp32_ldg(p, stream, pdl);
}

cudaError_t run_gemv_fp32_window(const GemvFp32Params& p, cudaStream_t stream, bool pdl) {
  return launch_router_gemv_fp32_window(p, stream, pdl);
}

int gemv_max_clusters(int splits) { return router_gemv_max_clusters(splits); }

cudaError_t run_bf16x2(int tile, const Bf16x2Params& p, cudaStream_t stream, bool pdl) {
  switch (tile) {
    case 0:
      return launch_router_gemm_bf16x2<Narrow>(p, stream, pdl);
    case 1:
      return launch_router_gemm_bf16x2<Wide>(p, stream, pdl);
    case 2:
      return launch_router_gemm_bf16x2<Wide96>(p, stream, pdl);
    case 4:
      return launch_router_gemm_bf16x2<Wide96Rs>(p, stream, pdl);
    case 5:
      return launch_router_gemm_bf16x2<WideRs>(p, stream, pdl);
    case 6:
      return launch_router_gemm_bf16x2<Wide96F>(p, stream, pdl);
    case 7:
      return launch_router_gemm_bf16x2<Wide96RsF>(p, stream, pdl);
    case 8:
      return launch_router_gemm_bf16x2<Wide96F4>(p, stream, pdl);
    default:
      return cudaErrorInvalidValue;
  }
}

int bf16x2_max_clusters(int tile, int splits) {
  switch (tile) {
    case 0:
      return bf16x2_max_active_clusters<Narrow>(splits);
    case 1:
      return bf16x2_max_active_clusters<Wide>(splits);
    case 2:
      return bf16x2_max_active_clusters<Wide96>(splits);
    case 4:
      return bf16x2_max_active_clusters<Wide96Rs>(splits);
    case 5:
      return bf16x2_max_active_clusters<WideRs>(splits);
    case 6:
      return bf16x2_max_active_clusters<Wide96F>(splits);
    case 7:
      return bf16x2_max_active_clusters<Wide96RsF>(splits);
    case 8:
      return bf16x2_max_active_clusters<Wide96F4>(splits);
    default:
      return 0;
  }
}

// {BM, BN} of each tile, for the Python planner.
void bf16x2_tile_shape(int tile, int* bm, int* bn) {
  *bm = tile == 0 ? Narrow::BM : tile == 1 || tile == 5 ? Wide::BM : Wide96::BM;
  *bn = tile == 0 ? Narrow::BN : tile == 1 || tile == 5 ? Wide::BN : Wide96::BN;
}

}  // namespace hpc::router_gemm
