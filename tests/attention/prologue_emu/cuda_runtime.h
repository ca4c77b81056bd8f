// Host emulation of the CUDA types and intrinsics the fused prologue kernel uses (prologue.cuh), for
// harness.cpp only: every thread of a block is a fiber (ucontext), switched at team collectives, which
// exchange values through xbuf between two barriers of the threads named by the mask.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__  // the kernel's only shared array is extern (dynamic): harness.cpp defines it

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3_ { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
typedef int cudaError_t;
typedef void* cudaStream_t;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorInvalidValue = 1;

namespace emu {
constexpr int kMaxThreads = 1024;
struct Fiber { ucontext_t ctx; uint3_ tid; bool done; std::vector<char> stack; };
extern Fiber* cur;
extern dim3 block, grid;
extern uint3_ cta;
extern unsigned long long xbuf[kMaxThreads];
void mask_barrier(unsigned mask);  // the threads of this warp named by `mask`
}  // namespace emu
#define threadIdx (emu::cur->tid)
#define blockIdx (emu::cta)
#define blockDim (emu::block)
#define gridDim (emu::grid)

using std::max;
using std::min;
template <typename T> T __ldg(const T* p) { return *p; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline void __syncwarp(unsigned mask) { emu::mask_barrier(mask); }
namespace emu {
// Every lane of `mask` publishes v, then reads the value of lane `src` of its width-segment.
template <typename T> T shfl_from(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8, "");
  unsigned long long u = 0;
  std::memcpy(&u, &v, sizeof(T));
  const int t = threadIdx.x, base = t - (t & 31);
  xbuf[t] = u;
  mask_barrier(mask);
  const unsigned long long r = xbuf[base + src];
  mask_barrier(mask);
  T o;
  std::memcpy(&o, &r, sizeof(T));
  return o;
}
}  // namespace emu
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = threadIdx.x & 31;
  return emu::shfl_from(mask, v, (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1)));
}
template <typename T> T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = threadIdx.x & 31;
  return emu::shfl_from(mask, v, (lane & ~(width - 1)) | (src_lane & (width - 1)));
}
