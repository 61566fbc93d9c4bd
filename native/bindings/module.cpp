// Module entry point for ticktensor._native: registers each concept's bindings.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

NB_MODULE(_native, m) {
  m.doc() = "ticktensor's C++ core (private; use the Python facades).";
}
