// ZeRO-1 checkpoints: the shard files beside a sharded step-N.h5, and the
// StateReader that reads any checkpoint's optimizer state and EMA by slices
// of the flattened parameters, so that a rank reads only what it keeps.
//
//   step-00000120.h5              rank 0: model, trainer state (version 3)
//   step-00000120.zero-0-of-2.h5  rank 0's slices
//   step-00000120.zero-1-of-2.h5  rank 1's slices
//
// A shard file:
//   /                        attributes format "wantrain-checkpoint-shard", version 1, rank, ranks, step
//   /optimizer/<param>/      exp_avg, exp_avg_sq: float32 [count]; attributes offset, numel, step
//   /ema/<param>             float32 [count]; attributes offset, numel (only with an EMA)
// The slices of each parameter over all shard files cover its numel
// elements exactly once. A resume may use another world size or no sharding:
// the reader re-partitions.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/ckpt/checkpoint.hpp"

namespace wt::ckpt {

inline constexpr const char* kShardFormat = "wantrain-checkpoint-shard";

// "step-00000120.zero-1-of-2.h5"
std::string shard_file_name(int64_t step, int rank, int ranks);
// The shard files of the checkpoint at `path` (its link resolved), in rank order.
std::vector<std::string> shard_paths(const std::string& path, int64_t step, int ranks);

// Writes `part` as a shard file (created or truncated); Error naming it on failure.
void write_shard(const std::string& path, const ShardPart& part, int64_t step);

class StateReader {
 public:
  enum class Kind { ExpAvg, ExpAvgSq, Ema };

  // Indexes the checkpoint at `path`: its own /optimizer and /ema, or the
  // slices in its shard files (each checked to belong to this checkpoint).
  // UsageError naming the file and object when something is unreadable.
  explicit StateReader(const std::string& path);

  bool has_optimizer() const { return has_optimizer_; }
  bool has_ema() const { return !index_[int(Kind::Ema)].empty(); }

  // UsageError naming the file and tensor unless the AdamW moments (when
  // the checkpoint has any) cover exactly these parameters, given as (name,
  // numel), and the EMA exactly `ema_parameters` (the averaged ones; empty:
  // the EMA is not checked).
  void check(const std::vector<std::pair<std::string, int64_t>>& parameters,
             const std::vector<std::pair<std::string, int64_t>>& ema_parameters) const;

  // Elements [offset, offset + count) of the flattened `name`, float32 [count].
  at::Tensor read(Kind kind, const std::string& name, int64_t offset, int64_t count) const;
  int64_t step(const std::string& name) const;  // AdamW's count for `name`

 private:
  struct Piece {
    std::string file, dataset;  // the dataset's path in the file
    int64_t offset = 0, count = 0, numel = 0;
  };
  std::string path_;
  bool has_optimizer_ = false;
  std::map<std::string, std::vector<Piece>> index_[3];
  std::map<std::string, int64_t> steps_;
};

}  // namespace wt::ckpt
