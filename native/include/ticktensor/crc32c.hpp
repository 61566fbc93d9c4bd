// CRC-32C (Castagnoli) of a byte range: the per-chunk checksum a store records at write time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// The CRC-32C of `size` bytes at `data`, continuing from `crc` (the CRC-32C of the bytes
// before them; 0 to start). Uses the CPU's crc32 instruction where it has one (SSE 4.2),
// a table otherwise; both give the same value as any CRC-32C (iSCSI, RFC 3720) library.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

// What read_checked read: the bytes (fewer than asked when the file ended first) and
// their CRC-32C (0 when not asked for).
struct CheckedRead {
  std::size_t bytes = 0;
  std::uint32_t crc = 0;
};

// Reads `size` bytes at byte `offset` of the file open as `fd` into `out` with pread (a
// read of a file that shrinks meanwhile comes short; nothing is mapped, so no SIGBUS),
// and with `checksum` their CRC-32C, a block at a time while the block is still in the
// CPU's cache. Stops early at the end of the file; throws SystemError on a read error.
CheckedRead read_checked(int fd, std::uint64_t offset, void* out, std::size_t size, bool checksum);

}  // namespace tt
