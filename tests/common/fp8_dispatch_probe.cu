// Host-only probe of the FP8 vector-path dispatch (test_fp8_dispatch.py builds it with nvcc and runs it
// on the CPU: no GPU, no CUDA call). Each input line holds the QuantParams fields the Python launcher
// sets (see FIELDS in the test); each output line names the kernel csrc/fp8_quant.cu's
// launch_vector_path would launch, in the same order of tries. Keep the two in step. `probe geometry`:
// each output line is the kernel's name, then its CTA's segments (tile_segs), lanes per segment (team), and for
// the tile kernels the launch's threads per CTA and CTAs.
#include <cstdio>
#include <string>

#include "hpc_common/fp8_quant.cuh"
#include "hpc_common/fp8_quant_small_seg.cuh"
#include "hpc_common/fp8_quant_tile_launch.cuh"

using namespace hpc::fp8;

// t: p with the chosen tile kernel's geometry (p itself when none applies); k: which (kNone: none).
static std::string choose(const QuantParams& p, int vec, QuantParams& t, TileKernel& k) {
  t = p;
  k = TileKernel::kNone;
  if (!p.vectorized) return "scalar";
  k = prepare_tile_kernel(t, vec);
  switch (k) {
    case TileKernel::kColumns:
      return "col_tile";
    case TileKernel::kFlat:
      return "flat";
    case TileKernel::kTiles:
      return "tile";
    case TileKernel::kRows:
      if (t.peel) return "odd_row_tile";  // launch_fp8_quant_row_tile: fp8_quant_odd_row_tile_kernel
      if (row_tile_covers(t)) return row_tile_partial_vectors(t, vec) ? "row_tile_cover" : "row_tile_cover_whole";
      switch (row_tile_vpt(t.seg_vecs, true)) {  // launch_fp8_quant_row_tile's kernels
        case 3:
          return "row_tile3";
        case kBulkVecPerThread:
          return "row_tile";
        default:  // launch_fp8_quant_row_tile: more than 256 lanes take the 512-thread kernel
          return t.team > kTileThreads ? "wide_row" : "long_row";
      }
    case TileKernel::kOddGroupRows:
      return "odd_group_row";
    case TileKernel::kNone:
      break;
  }
  if (small_seg_vectors_per_lane(p, vec)) return "small_seg";
  if (small_seg_masked_slots(p, vec)) return "small_seg_masked";
  return "generic";
}

// `probe divider`: set_segment_divider's multiply-shift (locate_cover's row of a segment) against the
// division for divisors 1..4096, a spread of larger ones up to 2^31 - 1, and segment indices at both
// ends of [0, 2^31) and on both sides of every multiple of d in a sample. Prints the first mismatch.
static int check_divider() {
  auto check = [](int64_t d) {
    QuantParams p{};
    p.segs_per_row = d;
    set_segment_divider(p);
    auto test = [&](int64_t s) {
      if (s < 0 || s >= (int64_t(1) << 31)) return true;
      const uint64_t got = (uint64_t(s) * p.seg_div_mul) >> p.seg_div_shift;
      if (got == uint64_t(s / d)) return true;
      printf("mismatch d=%lld s=%lld got=%llu\n", (long long)d, (long long)s, (unsigned long long)got);
      return false;
    };
    const int64_t top = (int64_t(1) << 31) - 1;
    for (int64_t s = 0; s < 4096; ++s) if (!test(s) || !test(top - s)) return false;
    for (int64_t k = 1; k < 2048; ++k) {
      const int64_t m = (top / d) * k / 2047 * d;  // multiples of d spread over the range
      if (!test(m - 1) || !test(m) || !test(m + d - 1)) return false;
    }
    return true;
  };
  for (int64_t d = 1; d <= 4096; ++d) if (!check(d)) return 1;
  for (int64_t d = 4097; d < (int64_t(1) << 31); d = d * 5 / 3 + 7) if (!check(d)) return 1;
  if (!check((int64_t(1) << 31) - 1) || !check(int64_t(1) << 30) || !check((int64_t(1) << 30) + 1)) return 1;
  printf("ok\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "divider") return check_divider();
  const bool geometry = argc > 1 && std::string(argv[1]) == "geometry";
  constexpr int kFields = 18;
  long long v[kFields];
  while (true) {
    int n = 0;
    while (n < kFields && scanf("%lld", &v[n]) == 1) ++n;
    if (n < kFields) break;
    QuantParams p{};
    p.rows = v[0];
    p.heads = v[1];
    p.row_len = v[2];
    p.seg_len = v[3];
    p.segs_per_row = v[4];
    p.x_stride_t = v[5];
    p.x_stride_h = v[6];
    p.q_stride_t = v[7];
    p.q_stride_h = v[8];
    p.scale_stride_row = v[9];
    p.scale_stride_seg = v[10];
    p.dtype = int(v[11]);
    p.vectorized = v[12] != 0;
    p.peel = v[13] != 0;
    p.q = reinterpret_cast<uint8_t*>(v[14]);
    p.scale_source = int(v[15]);
    p.per_tensor_dynamic = v[16] != 0;
    p.num_sms = int(v[17]);
    QuantParams t;
    TileKernel k;
    const std::string name = choose(p, p.dtype == kFP32 ? 4 : 8, t, k);
    if (geometry) {  // the tile kernels' launch: threads per CTA and CTAs (0 0 for the other kernels)
      const bool tiled = k != TileKernel::kNone;
      printf("%s %d %d %u %lld\n", name.c_str(), t.tile_segs, t.team, tiled ? tile_kernel_threads(t, k) : 0u,
             tiled ? (long long)t.num_tiles : 0ll);
    } else {
      printf("%s\n", name.c_str());
    }
  }
  return 0;
}
