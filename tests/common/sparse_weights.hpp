// A safetensors file of a model's names and shapes whose data is a hole: a
// sparse file of the whole size that takes no disk and that nothing reads
// until a tensor is loaded. For tests of what happens before loading (the
// header checks, the release settings) with the released sizes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>

#include "wantrain/wan/model/model_config.hpp"

namespace wt::testing {

// Writes `config`'s parameters as BF16 entries; returns the data's bytes.
inline int64_t write_sparse_weights(const wt::wan::WanConfig& config, const std::string& path) {
  std::string header = "{";
  int64_t offset = 0;
  for (const auto& [name, shape] : wt::wan::parameter_shapes(config)) {
    const int64_t bytes = 2 * std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    header += (offset ? ",\"" : "\"") + name + "\":{\"dtype\":\"BF16\",\"shape\":[";
    for (size_t i = 0; i < shape.size(); ++i) header += (i ? "," : "") + std::to_string(shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
    out << header;
  }
  std::filesystem::resize_file(path, 8 + header.size() + offset);
  return offset;
}

}  // namespace wt::testing
