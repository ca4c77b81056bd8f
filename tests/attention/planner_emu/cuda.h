// Host stand-in for cuda.h (planner emulation, harness.cpp): CUtensorMap only.
#pragma once
struct CUtensorMap { alignas(64) unsigned long long opaque[16]; };
