// A wantrain checkpoint's weights as a TensorSource, read one tensor at a
// time (never its optimizer moments): what a checkpoint teacher and a
// checkpoint --init load from.
#pragma once

#include <cstdint>
#include <string>

#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

struct CheckpointWeights {
  TensorSource source;  // float32 tensors by official name
  bool ema = false;     // the EMA weights (else the model's)
  int64_t step = 0;
};

// The model's weights (the checkpoint's groups that are its weights:
// ckpt::GroupRecord), the EMA's when `prefer_ema` and the checkpoint has an
// EMA (in its file, or in its shard files), else the trained ones.
// UsageError naming the file and the object when it cannot be read.
CheckpointWeights checkpoint_weights(const std::string& path, bool prefer_ema);

// UsageError naming the file for a distribution-matching checkpoint written
// before the fake score was a group of its own (`groups_recorded` false):
// its student and fake score cannot be told apart.
void refuse_ungrouped_distribution_matching(const std::string& path, bool groups_recorded);

}  // namespace wt::wan
