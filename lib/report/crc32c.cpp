#include "wantrain/report/crc32c.hpp"

#include <boost/crc.hpp>

namespace wt::report {

// Boost.CRC's table-driven CRC with the Castagnoli polynomial: Debian has no
// standalone CRC-32C library for C++, and Boost is a dependency already.
// Reflected input and output, all-ones initial value and final XOR: the
// parameters of CRC-32C (iSCSI, RFC 3720).
uint32_t crc32c(const void* data, size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace wt::report
