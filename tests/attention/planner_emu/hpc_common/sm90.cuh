// Host stand-in for hpc_common/sm90.cuh (planner emulation, harness.cpp): the named barriers the
// planner's row plans use (decode_plan_rows.cuh): wait, or arrive without waiting.
#pragma once
#include <cuda_runtime.h>
namespace emu {
void named_barrier(int id, int count);
void named_barrier_arrive(int id, int count);
}
namespace hpc::sm90 {
inline void named_barrier(int id, int count) { emu::named_barrier(id, count); }
inline void named_barrier_arrive(int id, int count) { emu::named_barrier_arrive(id, count); }
}  // namespace hpc::sm90
