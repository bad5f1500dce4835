// libFuzzer target: any bytes as a whole safetensors file. The header check
// must either refuse them with a UsageError or accept only tensors whose
// byte ranges lie inside the data; anything else (another exception, a crash,
// an out-of-bounds read that AddressSanitizer sees) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "wantrain/io/safetensors_header.hpp"
#include "wantrain/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  unsigned char first[8];
  std::memcpy(first, data, 8);
  try {
    const uint64_t length = wt::io::safetensors_header_length("fuzz", first, size);
    const std::string header(reinterpret_cast<const char*>(data) + 8, length);
    const auto parsed = wt::io::parse_safetensors_header("fuzz", header, size);
    volatile uint8_t sink = 0;
    for (const auto& e : parsed.entries) {
      if (e.end < e.begin || parsed.data_start + e.end > size) __builtin_trap();
      for (uint64_t i = e.begin; i < e.end; ++i) sink ^= data[parsed.data_start + i];  // ASan checks each byte
    }
  } catch (const wt::UsageError&) {
  }
  return 0;
}
