// Host stand-in for hpc_common/sm90.cuh (planner emulation, harness.cpp): the named barrier the
// planner's row plan uses (decode_plan_rows.cuh), over the first `count` threads of the block.
#pragma once
#include <cuda_runtime.h>
namespace emu {
void named_barrier(int id, int count);
}
namespace hpc::sm90 {
inline void named_barrier(int id, int count) { emu::named_barrier(id, count); }
}  // namespace hpc::sm90
