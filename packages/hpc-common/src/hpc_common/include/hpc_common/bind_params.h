// Binding-layer helper (host code, included by the packages' bindings.cpp only): expose a launcher's
// plain params struct to Python field by field, pointer fields as integer addresses, so a binding
// passes one struct instead of dozens of loose arguments and no torch type crosses.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

// cls: a py::class_<Struct>; the pointer member `name` of type `type*` reads and writes as an int.
#define HPC_BIND_PTR_FIELD(cls, Struct, name, type)                                                  \
  (cls).def_property(                                                                                \
      #name, [](const Struct& p) { return reinterpret_cast<std::uintptr_t>(p.name); },              \
      [](Struct& p, std::uintptr_t v) { p.name = reinterpret_cast<type*>(v); })
