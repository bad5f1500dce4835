// The header of a safetensors file (https://github.com/huggingface/safetensors):
// an 8-byte little-endian length N, then N bytes of JSON mapping each tensor
// name to {dtype, shape, data_offsets: [begin, end)} relative to the data that
// follows, and an optional "__metadata__" object of strings.
//
// Parsing checks everything before any data is touched: the JSON, every
// dtype, shape and offset pair, the byte count of each tensor, and that the
// tensors tile the data exactly (no overlaps, no holes, nothing past the end).
// Any failure is one UsageError naming the file and the tensor. This part
// needs no LibTorch, so that a fuzzer can drive it alone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace wt::io {

// The dtypes wantrain reads and writes.
enum class TensorDtype { F32, F16, BF16 };
const char* dtype_name(TensorDtype dtype);  // "F32", "F16", "BF16"
uint64_t dtype_size(TensorDtype dtype);

struct SafetensorsEntry {
  std::string name;
  TensorDtype dtype = TensorDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data section: 8 + N
};

// The header's JSON text `header` of a file `path` of `file_size` bytes.
SafetensorsHeader parse_safetensors_header(const std::string& path, const std::string& header, uint64_t file_size);

// The header length from the file's first 8 bytes, checked against the file
// size and the 100 MB limit of the official implementation.
uint64_t safetensors_header_length(const std::string& path, const unsigned char (&first_bytes)[8], uint64_t file_size);

}  // namespace wt::io
