// safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON mapping each tensor name to
// {dtype, shape, data_offsets: [begin, end)} relative to the data that follows,
// an optional "__metadata__" object of strings, then the raw little-endian data.
// wantrain reads and writes F32, F16 and BF16.
//
// The header is checked before any data is touched: its length against the
// file, the JSON, every dtype, shape and offset pair, the byte count of each
// tensor, and that the tensors tile the data exactly (no overlaps, no holes,
// nothing past the end). A file that fails any check gives one UsageError
// naming the file and the tensor; nothing reads out of bounds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wt::model {

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  // Parses and checks the header (see above). Reads no tensor data.
  static SafetensorsFile open(const std::string& path);
  // The same checks on a header held in memory, for a file of `file_size` bytes.
  static SafetensorsFile parse_header(const std::string& path, const std::string& header, uint64_t file_size);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // The tensor's data as a CPU tensor of its stored dtype; Error naming the
  // file and tensor when the read fails.
  at::Tensor read(const SafetensorsEntry& entry) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// "F32", "F16", "BF16" <-> dtype; UsageError for anything else.
const char* safetensors_dtype_name(at::ScalarType dtype);

// Writes `tensors` (in this order) converted to `dtype`, atomically: into
// path + ".tmp", then renamed. Error naming the file when writing fails.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
void write_safetensors(const std::string& path, const NamedTensors& tensors, at::ScalarType dtype,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace wt::model
