// safetensors files: reading tensors whose header parse_safetensors_header
// has checked (safetensors_header.hpp), and writing them. wantrain reads and
// writes F32, F16 and BF16; nothing reads outside the ranges the header check
// proved to lie inside the file.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/io/safetensors_header.hpp"

namespace wt::io {

at::ScalarType scalar_type(TensorDtype dtype);

class SafetensorsFile {
 public:
  // Reads and checks the header (see safetensors_header.hpp); reads no
  // tensor data. UsageError naming the file for any problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsEntry* find(const std::string& name) const;
  // The tensor's data as a CPU tensor of its stored dtype; Error naming the
  // file and tensor when the read fails.
  at::Tensor read(const SafetensorsEntry& entry) const;

 private:
  std::string path_;
  SafetensorsHeader header_;
};

// Writes `tensors` (in this order) converted to `dtype` (F32, F16 or BF16),
// atomically: into path + ".tmp", then renamed. Error naming the file when
// writing fails.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
void write_safetensors(const std::string& path, const NamedTensors& tensors, at::ScalarType dtype,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace wt::io
