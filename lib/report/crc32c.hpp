// CRC-32C (Castagnoli), the checksum of TFRecord framing, and its "masked"
// form that TensorFlow stores (a CRC of data holding CRCs is weak otherwise).
#pragma once

#include <cstddef>
#include <cstdint>

namespace wt::report {

uint32_t crc32c(const void* data, size_t size);

// Rotated right by 15 bits plus 0xa282ead8, as TensorFlow's crc32c::Mask.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace wt::report
