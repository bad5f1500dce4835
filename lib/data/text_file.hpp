// Text conditioning read from an HDF5 file of precomputed embeddings (e.g.
// umT5 outputs written with h5py): /text_emb [N, L, D] or [L, D], float32 or
// float16, and optionally /text_len [N] (int32; L when absent). A dataset
// shard is such a file too.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace wt::data {

struct TextCondition {
  at::Tensor embedding;  // [L, D] fp32, zero past `length`
  int32_t length = 0;
};

// Row `index` of the file; UsageError naming the file and dataset when it
// cannot be opened, lacks /text_emb, has another rank, or the index is out of range.
TextCondition read_text_condition(const std::string& path, int64_t index);

}  // namespace wt::data
