// C++ -> Python exception translation for ticktensor._native: the one place it happens.
#include <nanobind/nanobind.h>

#include <exception>

#include "ticktensor/errors.hpp"

namespace nb = nanobind;

namespace ttpy {

namespace {

// IndexError whose instance also carries the sample's values as attributes.
void raise_window_index_error(const tt::WindowIndexError& e) {
  try {
    nb::object exc = nb::handle(PyExc_IndexError)(e.what());
    exc.attr("batch_position") = e.batch_position();
    exc.attr("array_id") = e.array_id();
    exc.attr("start") = e.start();
    exc.attr("window") = e.window();
    PyErr_SetObject(PyExc_IndexError, exc.ptr());
  } catch (nb::python_error& failure) {
    failure.restore();  // Building the exception itself failed (e.g. MemoryError): raise that.
  }
}

// RuntimeError naming the batch position and the chunk that was not loaded.
void raise_chunk_not_loaded(const tt::ChunkNotLoadedError& e) {
  try {
    nb::object exc = nb::handle(PyExc_RuntimeError)(e.what());
    exc.attr("batch_position") = e.batch_position();
    exc.attr("chunk") = e.chunk();
    PyErr_SetObject(PyExc_RuntimeError, exc.ptr());
  } catch (nb::python_error& failure) {
    failure.restore();
  }
}

// OSError(errno, message): Python picks the subclass from errno (FileNotFoundError, ...).
void raise_os_error(const tt::SystemError& e) {
  try {
    nb::object exc = nb::handle(PyExc_OSError)(e.error_number(), e.what());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (nb::python_error& failure) {
    failure.restore();
  }
}

void translate(const std::exception_ptr& error, void* /*payload*/) {
  try {
    std::rethrow_exception(error);
  } catch (const tt::WindowIndexError& e) {
    raise_window_index_error(e);
  } catch (const tt::ChunkNotLoadedError& e) {
    raise_chunk_not_loaded(e);
  } catch (const tt::IndexError& e) {
    PyErr_SetString(PyExc_IndexError, e.what());
  } catch (const tt::ArgumentError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const tt::SystemError& e) {
    raise_os_error(e);
  }
  // Anything else propagates to nanobind's built-in translators (bad_alloc -> MemoryError, ...).
}

}  // namespace

void bind_errors(nb::module_& /*m*/) { nb::register_exception_translator(translate); }

}  // namespace ttpy
