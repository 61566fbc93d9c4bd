// Module entry point for ticktensor._native: registers each concept's bindings.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace ttpy {
void bind_errors(nb::module_& m);
void bind_thread_pool(nb::module_& m);
void bind_gather(nb::module_& m);
void bind_chunk_gather(nb::module_& m);
void bind_permutation(nb::module_& m);
void bind_row_take(nb::module_& m);
void bind_key_order(nb::module_& m);
void bind_column_stack(nb::module_& m);
void bind_time_bars(nb::module_& m);
void bind_mapped_file(nb::module_& m);
void bind_crc32c(nb::module_& m);
void bind_sample_prefetcher(nb::module_& m);
void bind_live_features(nb::module_& m);
}  // namespace ttpy

NB_MODULE(_native, m) {
  m.doc() = "ticktensor's C++ core (private; use the Python facades).";
  ttpy::bind_errors(m);
  ttpy::bind_thread_pool(m);
  ttpy::bind_gather(m);
  ttpy::bind_chunk_gather(m);
  ttpy::bind_permutation(m);
  ttpy::bind_row_take(m);
  ttpy::bind_key_order(m);
  ttpy::bind_column_stack(m);
  ttpy::bind_time_bars(m);
  ttpy::bind_mapped_file(m);
  ttpy::bind_crc32c(m);
  ttpy::bind_sample_prefetcher(m);
  ttpy::bind_live_features(m);
}
