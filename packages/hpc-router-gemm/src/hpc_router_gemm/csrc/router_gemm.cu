// The instantiated router GEMM kernels and their C entry points (used by bindings.cpp).
// Three tensor-core tiles keep the build short: NARROW for skinny M (64 x 32 tiles, many CTAs
// to spread the weight read), WIDE (128 x 192, the most reuse the register file allows with two
// accumulators) and WIDE96 (128 x 96: twice the tiles of WIDE, so large M fills the GPU with
// 2-CTA clusters, which always fit a TPC, instead of 4- or 8-CTA clusters, which leave waves).
// WIDE96_RS and WIDE_RS: the same tiles with the x fragments in registers (one shared-memory
// read of the x tile per K block for both products; same bits).
// WIDE96_F and WIDE96_RSF: WIDE96 and WIDE96_RS with both products in one m64n192k16 wgmma per K
// step; WIDE96_F4: WIDE96_F with a 4-stage ring (Lite's large-M rows).
// WIDE128_F: the fused 128 x 128 tile (one m64n256k16 per K step, 4 stages):
// N = 384 in 3 tiles, so Lite M = 1024 is 24 tiles and a 4-CTA cluster split fits in one wave
// (30 such clusters are resident, 32 of the 96-column tile's were needed).
// NARROW48_F: a fused 64 x 48 tile (one m64n96k16 per K step, 5 stages: two CTAs per SM): N = 768
// in 16 tiles, so Chat's small-M cluster split S = 8 is 128 CTAs, one per SM, where NARROW's 24
// tiles made 192 (60 SMs running two, the split waiting for its slowest CTAs).
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
using Wide128F = Bf16x2Config<128, 2, 4, false, true>;
using Narrow48F = Bf16x2Config<48, 1, 5, false, true>;

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

// The one map from a tile id (heuristics.TILES; 3 is the gemv kernel's key, not a wgmma tile) to
// its configuration: f(Config{}) for a known id, else `unknown`.
template <class R, class F>
R with_tile(int tile, R unknown, F&& f) {
  switch (tile) {
    case 0:
      return f(Narrow{});
    case 1:
      return f(Wide{});
    case 2:
      return f(Wide96{});
    case 4:
      return f(Wide96Rs{});
    case 5:
      return f(WideRs{});
    case 6:
      return f(Wide96F{});
    case 7:
      return f(Wide96RsF{});
    case 8:
      return f(Wide96F4{});
    case 9:
      return f(Wide128F{});
    case 10:
      return f(Narrow48F{});
    default:
      return unknown;
  }
}

cudaError_t run_bf16x2(int tile, const Bf16x2Params& p, cudaStream_t stream, bool pdl) {
  return with_tile(tile, cudaErrorInvalidValue,
                   [&](auto c) { return launch_router_gemm_bf16x2<decltype(c)>(p, stream, pdl); });
}

int bf16x2_max_clusters(int tile, int splits) {
  return with_tile(tile, 0, [&](auto c) { return bf16x2_max_active_clusters<decltype(c)>(splits); });
}

// {BM, BN} of each tile ({0, 0} for an unknown id).
void bf16x2_tile_shape(int tile, int* bm, int* bn) {
  *bm = with_tile(tile, 0, [](auto c) { return decltype(c)::BM; });
  *bn = with_tile(tile, 0, [](auto c) { return decltype(c)::BN; });
}

}  // namespace hpc::router_gemm
