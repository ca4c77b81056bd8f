// Shared-memory layout and thread roles of the paged decode kernel (paged_decode.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hpc::attn {

template <bool kFp8Kv, bool kFp8Q>
struct DecodeConfig {
  static constexpr int kTile = 64;
  static constexpr int kDim = 128;
  static constexpr int kRowBytes = kFp8Kv ? 128 : 256;
  static constexpr int kRowPitch = kRowBytes + 16;  // 16 B pad: conflict-free ldmatrix rows
  static constexpr int kQRowBytes = kFp8Q ? 128 : 256;
  static constexpr int kQPitch = 272;
  static constexpr int kStages = kFp8Kv ? 7 : 4;  // ~112 / 128 KB of KV in flight per SM
  static constexpr int kKOff = 0;
  static constexpr int kVOff = kTile * kRowPitch;
  static constexpr int kQOff = 2 * kTile * kRowPitch;
  static constexpr int kStageBytes = kQOff + 16 * kQPitch;
  static constexpr int kMergePitch = 136;  // floats; conflict-free float2 stores
  static constexpr int kMergeOff = kStages * kStageBytes;
  static constexpr int kStatsOff = kMergeOff + 4 * 16 * kMergePitch * 4;
  static constexpr int kBarOff = kStatsOff + 2 * 4 * 16 * 4;
  static constexpr int kFlagOff = kBarOff + 2 * kStages * 8;  // int: "this CTA merges" broadcast
  static constexpr int kSmemBytes = kFlagOff + 16;
  static constexpr int kConsumerWarps = 4;
  static constexpr int kProducerThreads = 128;
  static constexpr int kThreads = 32 * kConsumerWarps + kProducerThreads;
  static_assert(kStageBytes % 16 == 0 && kMergeOff % 16 == 0 && kBarOff % 8 == 0, "alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// Physical head-dim column of accumulator element e (0, 1) of n-tile nt held by lane quad j.
template <bool kFp8Kv>
__device__ __forceinline__ int out_col(int nt, int j, int e) {
  if constexpr (kFp8Kv) {
    // FP8 V fragments are built so that n-tile 4u + r, column c holds d = 32u + 4c + r.
    return 32 * (nt >> 2) + 4 * (2 * j + e) + (nt & 3);
  } else {
    return 8 * nt + 2 * j + e;
  }
}

}  // namespace hpc::attn
