// A read-only memory mapping of a file that holds no file descriptor.
#pragma once

#include <cstddef>

namespace tt {

// Maps the first `size` bytes of the file open as `fd` (the caller keeps and closes `fd`;
// the mapping stays valid after that) until the object is destroyed.
//
// Python's mmap objects duplicate the descriptor of every file they map and hold it as
// long as the mapping lives, so a cache of a few thousand mapped chunks runs into the
// process's limit on open files (often 1024). This mapping holds none.
//
// `populate` maps every page at once (MAP_POPULATE, where the platform has it);
// `willneed` asks the kernel to read the whole file ahead (MADV_WILLNEED). Throws
// SystemError with errno when mmap fails, ArgumentError when size is 0.
class MappedFile {
 public:
  MappedFile(int fd, std::size_t size, bool populate, bool willneed);
  ~MappedFile();

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tt
