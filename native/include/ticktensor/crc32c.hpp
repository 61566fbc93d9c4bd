// CRC-32C (Castagnoli) of a byte range: the per-chunk checksum a store records at write time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// The CRC-32C of `size` bytes at `data`, continuing from `crc` (the CRC-32C of the bytes
// before them; 0 to start). Uses the CPU's crc32 instruction where it has one (SSE 4.2),
// a table otherwise; both give the same value as any CRC-32C (iSCSI, RFC 3720) library.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

}  // namespace tt
