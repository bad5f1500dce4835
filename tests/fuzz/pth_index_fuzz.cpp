// libFuzzer target: any bytes as a whole .pth file. The restricted reader
// must either refuse them with a UsageError or accept only tensors whose
// bytes lie inside the file; anything else (another exception, a crash, an
// out-of-bounds read that AddressSanitizer sees) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "wantrain/io/pth_index.hpp"
#include "wantrain/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto read = [&](uint64_t offset, uint64_t bytes) {
    if (offset > size || bytes > size - offset) __builtin_trap();  // the reader checks ranges before reading
    return std::string(reinterpret_cast<const char*>(data) + offset, bytes);
  };
  try {
    const auto tensors = wt::io::read_pth_index("fuzz", size, read);
    volatile uint8_t sink = 0;
    for (const auto& t : tensors) {
      const uint64_t first = uint64_t(t.storage_offset) * wt::io::pth_dtype_size(t.dtype);
      const uint64_t extent = t.extent_bytes();
      if (extent > t.storage_bytes || t.data_offset + t.storage_bytes > size) __builtin_trap();
      for (uint64_t i = first; i < extent; ++i) sink ^= data[t.data_offset + i];  // ASan checks each byte
    }
  } catch (const wt::UsageError&) {
  }
  return 0;
}
