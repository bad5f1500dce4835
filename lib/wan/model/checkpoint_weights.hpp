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

// The EMA weights when `prefer_ema` and the checkpoint has an EMA (in its
// file, or in its shard files), else the model's. UsageError naming the file
// and the object when it cannot be read.
CheckpointWeights checkpoint_weights(const std::string& path, bool prefer_ema);

}  // namespace wt::wan
