#include <pybind11/pybind11.h>

int tiny_host_value();

PYBIND11_MODULE(HPC_EXT_NAME, m) { m.def("value", &tiny_host_value); }
