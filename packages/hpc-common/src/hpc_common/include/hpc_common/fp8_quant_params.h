// Constants and the plain parameter struct of the FP8 quantisation kernels (fp8_quant.cuh).
// Host-safe: the binding layer (a host-compiled .cpp) includes it.
#pragma once

#include <cstdint>

namespace hpc {
namespace fp8 {

constexpr float kE4M3Max = 448.0f;
// Dynamic scales never go below kAmaxFloor / 448, so a zero (or all-NaN) segment gets a
// finite, normal scale and an all-zero output. Same value as fp8/reference.py AMAX_FLOOR.
constexpr float kAmaxFloor = 1e-10f;
// Vectors each thread keeps in flight: 16 (16-byte vectors, or scalars on the scalar path).
// First H200 measurement with 4 per thread: 48-50% of the copy bandwidth (too few bytes in
// flight per SM); with 8: per-token 60-72%, where a 4096-wide bf16 row needed a 64-thread
// team and two block barriers per row. 16 makes that row one warp (shuffles only); no spills.
constexpr int vec_per_thread(int vec) { return 16; }
constexpr int kMinBlock = 256;
// Largest team (and block). 1024 would cap registers at 64 and make the vector path spill.
constexpr int kMaxTeam = 512;
// fp8_amax_kernel launches at most kAmaxBlocksPerSm * num_sms blocks, one partial each:
// the workspace the caller passes holds that many uint32.
constexpr int kAmaxBlocksPerSm = 8;

enum InputDtype : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };
enum ScaleSource : int { kScaleDynamic = 0, kScaleStatic = 1, kScalePartials = 2 };

struct QuantParams {
  const void* x;               // input, element type `dtype`
  uint8_t* q;                  // output E4M3 bytes
  float* scale;                // dynamic: one scale per segment (per-tensor: scale[0]); else unused
  const float* static_scale;   // static: device scalar, or nullptr to use static_value
  float static_value;
  uint32_t* workspace;         // per-tensor dynamic: kAmaxBlocksPerSm * num_sms uint32
  // Geometry: row r = t * heads + h (heads = 1 for 2-D input); a row holds row_len elements,
  // cut into segs_per_row segments of seg_len (the last one may be shorter).
  int64_t rows, heads, row_len, seg_len, segs_per_row;
  int64_t x_stride_t, x_stride_h;   // element strides of x for t and h (last dim contiguous)
  int64_t q_stride_t, q_stride_h;
  // Scale of segment g of row r lives at scale[r * scale_stride_row + g * scale_stride_seg].
  // Column-major group scales (scale_stride_row == 1, pitch scale_stride_seg >= rows) get
  // their padding rows rows..pitch-1 written with 0.
  int64_t scale_stride_row, scale_stride_seg;
  int dtype;                   // InputDtype
  int scale_source;            // ScaleSource; kScalePartials is set by the launcher
  bool per_tensor_dynamic;     // chain fp8_amax_kernel -> fp8_quant_kernel
  bool ue8m0;                  // round dynamic scales up to a power of two
  bool vectorized;             // caller checked the alignment of every segment start
  bool peel;                   // vectorized with a scalar head per segment (x, q misaligned alike)
  int num_sms;
  // Filled by the launcher:
  int team;
  int num_partials;
  bool reverse;                // visit segments last-first (L2 reuse after the amax pass)
  // Tiles (fp8_quant_tile_geometry.cuh): runs of run_segs gap-free segments, cut into
  // tiles_per_run tiles of up to tile_segs segments.
  int tile_segs;
  int64_t run_segs, tiles_per_run, num_tiles;
  int seg_vecs;                // row tile kernel (fp8_quant_tile.cuh): vectors per segment, up to 4 x team
  // Row tile covers (fp8_quant_tile.cuh): segment s < 2^31 lies in row (s * seg_div_mul) >> seg_div_shift,
  // a division by segs_per_row in two instructions (SegmentDivider) where div_index took ~20 on the
  // path to every CTA's first load.
  uint32_t seg_div_mul;
  int seg_div_shift;
};

}  // namespace fp8
}  // namespace hpc
