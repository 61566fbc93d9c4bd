// Python binding of tt::ThreadPool.
#include <nanobind/nanobind.h>

#include <cstddef>

#include "ticktensor/thread_pool.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

void bind_thread_pool(nb::module_& m) {
  nb::class_<tt::ThreadPool>(m, "ThreadPool",
                             "A fixed pool of worker threads shared by native kernels.\n\n"
                             "``size`` threads work on each call: ``size - 1`` workers started\n"
                             "once, plus the calling thread. Several Python threads may use one\n"
                             "pool at the same time.")
      .def(nb::init<std::size_t>(), "n_threads"_a,
           "Start ``n_threads - 1`` worker threads (``n_threads >= 1``).")
      .def_prop_ro("size", &tt::ThreadPool::size,
                   "Threads that work on one call, the calling thread included.");
}

}  // namespace ttpy
