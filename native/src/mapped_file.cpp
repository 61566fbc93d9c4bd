// tt::MappedFile: mmap of a descriptor the caller owns; munmap on destruction.
#include "ticktensor/mapped_file.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "ticktensor/errors.hpp"

namespace tt {

MappedFile::MappedFile(int fd, std::size_t size, bool populate, bool willneed) : size_(size) {
  if (size == 0) throw ArgumentError("MappedFile: size must be > 0 (mmap cannot map 0 bytes)");
  int flags = MAP_SHARED;
#ifdef MAP_POPULATE
  if (populate) flags |= MAP_POPULATE;
#else
  static_cast<void>(populate);
#endif
  void* data = ::mmap(nullptr, size, PROT_READ, flags, fd, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    throw SystemError(error, "mmap of descriptor " + std::to_string(fd) + " (" +
                                 std::to_string(size) + " bytes): " + std::strerror(error));
  }
  data_ = data;
  if (willneed) {
    // Advice only: a kernel that ignores it still maps the file correctly.
    static_cast<void>(::madvise(data_, size_, MADV_WILLNEED));
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace tt
