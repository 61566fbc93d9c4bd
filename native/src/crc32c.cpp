// tt::crc32c: three interleaved hardware streams where the CPU has SSE 4.2, a table otherwise.
#include "ticktensor/crc32c.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include "ticktensor/errors.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TT_CRC32C_X86 1
#endif

namespace tt {

namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78U;  // Castagnoli, bit-reflected

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1U) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

std::uint32_t software(const unsigned char* p, std::size_t size, std::uint32_t crc) {
  for (std::size_t i = 0; i < size; ++i) crc = kTable[(crc ^ p[i]) & 0xFFU] ^ (crc >> 8);
  return crc;
}

// Multiplication in GF(2)[x] modulo the polynomial (bit-reflected): shifting a CRC over
// zero bytes, so that CRCs of consecutive blocks computed independently can be joined.
std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (int i = 0; i < 32; ++i) {
    if (a & 0x80000000U) product ^= b;
    a <<= 1;
    b = (b & 1U) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8 * bytes) modulo the polynomial: the operator that appends `bytes` zero bytes.
std::uint32_t shift_operator(std::size_t bytes) {
  std::uint32_t result = 0x80000000U;  // x^0
  std::uint32_t power = 0x00800000U;   // x^8: one zero byte
  for (std::size_t n = bytes; n != 0; n >>= 1) {
    if (n & 1U) result = multiply(result, power);
    power = multiply(power, power);
  }
  return result;
}

// Bytes per stream per block: the crc32 instruction has a latency of 3 cycles and a
// throughput of 1, so three independent streams keep it busy.
constexpr std::size_t kBlock = 8192;

#ifdef TT_CRC32C_X86

__attribute__((target("sse4.2"))) std::uint32_t stream(const unsigned char* p, std::size_t size,
                                                       std::uint32_t crc) {
  std::uint64_t c = crc;
  for (; size >= 8; size -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; size > 0; --size, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

__attribute__((target("sse4.2"))) std::uint32_t hardware(const unsigned char* p, std::size_t size,
                                                         std::uint32_t crc) {
  static const std::uint32_t shift = shift_operator(kBlock);
  while (size >= 3 * kBlock) {
    std::uint64_t a = crc, b = 0, c = 0;
    for (std::size_t i = 0; i < kBlock; i += 8) {
      std::uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + kBlock + i, 8);
      std::memcpy(&wc, p + 2 * kBlock + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    // crc(A B C) = shift(shift(crc(A)) ^ crc(B)) ^ crc(C), the latter two started from 0.
    crc = multiply(static_cast<std::uint32_t>(a), shift) ^ static_cast<std::uint32_t>(b);
    crc = multiply(crc, shift) ^ static_cast<std::uint32_t>(c);
    p += 3 * kBlock;
    size -= 3 * kBlock;
  }
  return stream(p, size, crc);
}

bool has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#ifdef TT_CRC32C_X86
  if (has_sse42()) return ~hardware(p, size, crc);
#endif
  return ~software(p, size, crc);
}

CheckedRead read_checked(int fd, std::uint64_t offset, void* out, std::size_t size, bool checksum) {
  // Blocks small enough to stay in the core's cache between the copy and the checksum,
  // and whole multiples of the three streams' blocks (a tail runs on one stream).
  constexpr std::size_t kReadBlock = 10 * 3 * kBlock;
  auto* p = static_cast<unsigned char*>(out);
  CheckedRead done;
  while (done.bytes < size) {
    const std::size_t want = std::min(kReadBlock, size - done.bytes);
    const ssize_t n = ::pread(fd, p + done.bytes, want, static_cast<off_t>(offset + done.bytes));
    if (n < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      throw SystemError(error, "pread of " + std::to_string(want) + " bytes at byte " +
                                   std::to_string(offset + done.bytes) + ": " +
                                   std::strerror(error));
    }
    if (n == 0) break;  // the end of the file
    if (checksum) done.crc = crc32c(p + done.bytes, static_cast<std::size_t>(n), done.crc);
    done.bytes += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace tt
