// Host emulation of the CUDA types and intrinsics the decode planner uses, for harness.cpp only
// (a CPU test of decode_plan.cuh). Warp collectives exchange through xbuf between two warp
// barriers, so every lane of the warp must call them, as full-mask calls on the GPU require.
#pragma once
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <ucontext.h>
#include <vector>
#include <cstdlib>
#include <cstdio>
struct int2 { int x, y; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() = default; dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
typedef int cudaError_t;
typedef void* cudaStream_t;
struct uint3_ { unsigned x, y, z; };

namespace emu {
constexpr int kMaxThreads = 1024;
struct Fiber { ucontext_t ctx; uint3_ tid; bool done; std::vector<char> stack; };
extern Fiber* cur;
extern dim3 block;
extern dim3 grid;
extern uint3_ cta;
void yield();
void warp_barrier();
void block_barrier();
extern unsigned long long xbuf[kMaxThreads];
}  // namespace emu
#define threadIdx (emu::cur->tid)
#define blockDim (emu::block)
#define blockIdx (emu::cta)
#define gridDim (emu::grid)

inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned __brev(unsigned x) { unsigned r = 0; for (int i = 0; i < 32; ++i) if (x >> i & 1) r |= 1u << (31 - i); return r; }
using std::min;
using std::max;
inline long long min(long long a, int b) { return a < b ? a : b; }
inline long long min(int a, long long b) { return a < b ? a : b; }
inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barrier(); }  // every lane of the warp calls it
inline int __syncthreads_count(int pred) {
  static int cnt[2]; static int ph = 0;
  int my = ph; emu::block_barrier(); if (threadIdx.x == 0) cnt[my] = 0; emu::block_barrier();
  __atomic_fetch_add(&cnt[my], pred ? 1 : 0, __ATOMIC_RELAXED); emu::block_barrier();
  int r = cnt[my]; emu::block_barrier(); if (threadIdx.x == 0) ph ^= 1; emu::block_barrier(); return r;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
template <typename T> T __ldcg(const T* p) { return *p; }
template <typename T> T emu_xchg(T v, int src_lane) {
  static_assert(sizeof(T) <= 8, "");
  unsigned long long u = 0; std::memcpy(&u, &v, sizeof(T));
  const int t = threadIdx.x, w = t & ~31;
  emu::xbuf[t] = u; emu::warp_barrier();
  unsigned long long r = emu::xbuf[w + (src_lane & 31)]; emu::warp_barrier();
  T o; std::memcpy(&o, &r, sizeof(T)); return o;
}
template <typename T> T __shfl_sync(unsigned, T v, int src) { return emu_xchg(v, src); }
template <typename T> T __shfl_up_sync(unsigned, T v, unsigned d) {
  const int lane = threadIdx.x & 31; return emu_xchg(v, (int)d <= lane ? lane - (int)d : lane);
}
template <typename T> T __shfl_down_sync(unsigned, T v, unsigned d) {
  const int lane = threadIdx.x & 31; return emu_xchg(v, lane + (int)d < 32 ? lane + (int)d : lane);
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int m) { return emu_xchg(v, (threadIdx.x & 31) ^ m); }
inline unsigned emu_gather_warp(unsigned long long v, unsigned long long (*op)(unsigned long long, unsigned long long, int)) {
  const int t = threadIdx.x, w = t & ~31;
  emu::xbuf[t] = v; emu::warp_barrier();
  unsigned long long acc = 0; for (int i = 0; i < 32; ++i) acc = op(acc, emu::xbuf[w + i], i);
  emu::warp_barrier(); return (unsigned)acc;
}
inline unsigned __ballot_sync(unsigned, int pred) {
  return emu_gather_warp(pred ? 1 : 0, [](unsigned long long a, unsigned long long x, int i) { return a | (x << i); });
}
inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
inline int __all_sync(unsigned m, int pred) { return __ballot_sync(m, pred) == 0xffffffffu; }
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return emu_gather_warp(v, [](unsigned long long a, unsigned long long x, int) { return (unsigned long long)(unsigned)(a + x); });
}
inline int __reduce_add_sync(unsigned m, int v) { return (int)__reduce_add_sync(m, (unsigned)v); }
inline int __reduce_max_sync(unsigned, int v) {
  return (int)emu_gather_warp((unsigned)v, [](unsigned long long a, unsigned long long x, int i) {
    return i == 0 ? x : (unsigned long long)(unsigned)std::max((int)(unsigned)a, (int)(unsigned)x); });
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return emu_gather_warp(v, [](unsigned long long a, unsigned long long x, int) { return std::max(a, x); });
}
inline unsigned __reduce_or_sync(unsigned, unsigned v) {
  return emu_gather_warp(v, [](unsigned long long a, unsigned long long x, int) { return a | x; });
}
