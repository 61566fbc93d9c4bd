// Error types the C++ core throws; the bindings map each to one Python exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tt {

// An index names an element that does not exist.
class IndexError : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

// A sample in a batch names an array or rows that do not exist. Carries the batch position
// and the offending values so the message (and callers) can say which sample was wrong.
class WindowIndexError : public IndexError {
 public:
  WindowIndexError(std::size_t batch_position, std::int64_t array_id, std::int64_t start,
                   std::int64_t window, const std::string& message)
      : IndexError(message),
        batch_position_(batch_position),
        array_id_(array_id),
        start_(start),
        window_(window) {}

  std::size_t batch_position() const noexcept { return batch_position_; }
  std::int64_t array_id() const noexcept { return array_id_; }
  std::int64_t start() const noexcept { return start_; }
  std::int64_t window() const noexcept { return window_; }

 private:
  std::size_t batch_position_;
  std::int64_t array_id_;
  std::int64_t start_;
  std::int64_t window_;
};

// A window reads a chunk whose rows are not loaded (a bug in the caller's scheduling).
class ChunkNotLoadedError : public std::logic_error {
 public:
  ChunkNotLoadedError(std::size_t batch_position, std::size_t chunk, const std::string& message)
      : std::logic_error(message), batch_position_(batch_position), chunk_(chunk) {}

  std::size_t batch_position() const noexcept { return batch_position_; }
  std::size_t chunk() const noexcept { return chunk_; }

 private:
  std::size_t batch_position_;
  std::size_t chunk_;
};

// An argument has the wrong shape, type, layout or value; the message says expected vs got.
class ArgumentError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A system call failed; carries its errno so the binding can raise the matching OSError.
class SystemError : public std::runtime_error {
 public:
  SystemError(int error_number, const std::string& message)
      : std::runtime_error(message), error_number_(error_number) {}

  int error_number() const noexcept { return error_number_; }

 private:
  int error_number_;
};

}  // namespace tt
