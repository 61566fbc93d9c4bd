// Checks and descriptions of numpy arrays shared by the binding files.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ticktensor/errors.hpp"

namespace ttpy {

namespace nb = nanobind;

template <typename Array>
inline std::string shape_text(const Array& a) {
  std::string text = "(";
  for (std::size_t d = 0; d < a.ndim(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(a.shape(d));
  }
  return text + (a.ndim() == 1 ? ",)" : ")");
}

template <typename Array>
inline std::string strides_text(const Array& a) {
  std::string text = "(";
  for (std::size_t d = 0; d < a.ndim(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(a.stride(d) * static_cast<std::int64_t>(a.itemsize()));
  }
  return text + (a.ndim() == 1 ? ",)" : ")");
}

template <typename Array>
inline bool is_float32(const Array& a) {
  return a.dtype() == nb::dtype<float>();
}

// True when rows follow each other in memory; like numpy, strides of length-1 axes and of
// empty arrays do not matter.
template <typename Array>
inline bool is_c_contiguous(const Array& a) {
  if (a.size() == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected) return false;
    expected *= static_cast<std::int64_t>(a.shape(d));
  }
  return true;
}

// numpy's name for a DLPack dtype, e.g. "float64".
inline std::string dtype_text(nb::dlpack::dtype dt) {
  static const char* const kinds[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  const char* kind = dt.code < 7 ? kinds[dt.code] : "unknown";
  if (dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool)) return kind;
  return kind + std::to_string(dt.bits);
}

inline std::string type_of(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// A writable CPU array of any dtype and layout; to_out() checks it by hand.
using OutArray = nb::ndarray<nb::device::cpu>;

// `obj` as a writable C-contiguous float32 [batch, window, features] array, or ArgumentError.
inline OutArray to_out(nb::handle obj, std::size_t batch, std::int64_t window,
                       std::int64_t features) {
  const std::string expected = "(" + std::to_string(batch) + ", " + std::to_string(window) + ", " +
                               std::to_string(features) + ")";
  OutArray a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    nb::ndarray<nb::ro, nb::device::cpu> readonly;
    if (nb::try_cast(obj, readonly, /*convert=*/false)) {
      throw tt::ArgumentError("out: expected a writable array, got a read-only one");
    }
    throw tt::ArgumentError("out: expected a writable float32 numpy array of shape " + expected +
                            ", got " + type_of(obj));
  }
  if (!is_float32(a)) {
    throw tt::ArgumentError("out: expected dtype float32, got " + dtype_text(a.dtype()));
  }
  const bool shape_ok = a.ndim() == 3 && a.shape(0) == batch &&
                        static_cast<std::int64_t>(a.shape(1)) == window &&
                        static_cast<std::int64_t>(a.shape(2)) == features;
  if (!shape_ok) {
    throw tt::ArgumentError("out: expected shape " + expected + ", got " + shape_text(a));
  }
  if (!is_c_contiguous(a)) {
    throw tt::ArgumentError("out: expected a C-contiguous array, got byte strides " +
                            strides_text(a));
  }
  return a;
}

}  // namespace ttpy
