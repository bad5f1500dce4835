// One checkpoint: everything a run needs to continue exactly where it was,
// as one HDF5 file with one group per component (docs/checkpoint-format.md).
// Version 2:
//
//   /                     attributes format, version, model_config (JSON),
//                         run_options (JSON: the resolved options, information only)
//   /engine               attributes step, skipped, lr, val_loss; dataset rng_cpu (uint8)
//   /engine/scaler        attributes loss_scale, good_steps (fp16 dynamic loss scaling)
//   /model/<param>        float32, the trainable parameter's shape, by name;
//                         attribute groups (JSON, only with more than one trained
//                         group): [{"name", "prefix", "ema", "weights"}, ...], each
//                         group's tensors named by its prefix (GroupRecord)
//   /ema/<param>          float32 (only with an EMA)
//   /optimizer            attribute kind ("adamw"); /optimizer/<param>/ exp_avg, exp_avg_sq
//                         (float32) and attribute step (AdamW's count), by parameter name
//   /sampler              attributes epoch, sampler_epoch, consumed, world_size, shard_affinity
//   /objective            attribute kind, and the objective's own attributes
//                         (distillation: teacher, teacher_checksum)
//
// Version 3 is a ZeRO-1 (sharded) checkpoint: the same file without /ema
// and /optimizer members; /optimizer has attributes zero_shards (W) and ema
// (1 when the shards hold an EMA), and W shard files beside it hold every
// rank's slices of the AdamW moments and EMA (shard_file.hpp).
//
// Version 1 (one /trainer group, the rest at the root, optimizer state
// under /optim) is still read.
//
// Reading checks the whole file before returning, and every error names the
// file and the tensor or attribute.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <future>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wt::ckpt {

inline constexpr const char* kFormat = "wantrain-checkpoint";
inline constexpr int kVersion = 2;         // what write_checkpoint writes unsharded
inline constexpr int kShardedVersion = 3;  // and with shard files; versions 1 to 3 are read

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct OptimizerSlot {
  std::string name;  // the parameter's
  int64_t step = 0;  // AdamW's bias-correction count
  at::Tensor exp_avg, exp_avg_sq;
};

// ZeRO-1: one rank's part of the optimizer state and EMA, as slices of the
// flattened parameters: elements [offset, offset + count) of `name`.
struct StateSlice {
  std::string name;
  int64_t offset = 0;
  int64_t numel = 0;                    // the whole parameter's
  int64_t step = 0;                     // AdamW's count
  at::Tensor exp_avg, exp_avg_sq, ema;  // [count] float32; ema undefined without one
};
struct ShardPart {
  int rank = 0, ranks = 0;  // ranks 0: not a sharded checkpoint
  std::vector<StateSlice> slices;
};

// A trained group as a checkpoint records it (train::ParameterGroup without
// its tensors): the /model tensors whose names begin with `prefix` (the
// longest prefix that fits) are its own. A file without the record holds
// one group, "model", with prefix "", its EMA kept and its weights the model.
struct GroupRecord {
  std::string name = "model";
  std::string prefix;
  bool ema = true;      // its tensors are in /ema (when the run kept one)
  bool weights = true;  // the trained model (weights files, exports); false: training state only
};
// The group a tensor named `name` belongs to.
const GroupRecord& group_of(const std::vector<GroupRecord>& groups, const std::string& name);
// The tensors of `tensors` (a checkpoint's /model or /ema) whose groups are
// the model's weights, under the parameters' own names (without the prefix).
std::vector<std::pair<std::string, at::Tensor>> model_weights(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::vector<GroupRecord>& groups);

struct TrainerState {
  int64_t step = 0;  // optimizer steps taken
  int64_t epoch = 0;
  int64_t sampler_epoch = 0, sampler_consumed = 0;  // where the next batch starts
  int64_t skipped = 0;
  double lr = 0;                                                 // of the last step taken
  double loss_scale = std::numeric_limits<double>::quiet_NaN();  // fp16 runs only
  int64_t loss_scale_good_steps = 0;
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // at this step, if validated
};

struct Checkpoint {
  NamedTensors model, ema;  // CPU float32
  std::vector<OptimizerSlot> optim;
  TrainerState state;
  at::Tensor rng_cpu;                    // LibTorch's default CPU generator state (uint8)
  std::string run_config, model_config;  // JSON
  int world_size = 1;
  bool shard_affinity = false;  // of the sampler that wrote it: its data order depends on world_size
  // The objective's kind ("flow-matching", "distillation", ...) and its own
  // state, e.g. a distillation teacher's path and weights checksum (the
  // teacher's weights are an input, like the data, and are not stored).
  std::string objective_kind;
  std::map<std::string, std::string> objective;
  std::vector<GroupRecord> groups = {GroupRecord{}};
  bool groups_recorded = false;  // read from the file's record (not the default)
  int version = kVersion;        // of the file it was read from
  // Sharded (ZeRO-1): this rank's slices, written to its shard file; the
  // main file (rank 0's) then holds no optimizer state or EMA.
  ShardPart shard;
  bool sharded_ema = false;  // the shards hold an EMA
  // Valid while the tensors above are still being copied in (the Engine's
  // snapshot finishes on a thread of its own): a writer waits for it first.
  std::shared_future<void> filled;

  int64_t tensor_bytes() const;
};

// What read_checkpoint reads besides the model and the trainer state.
// The AdamW moments and the EMA come from the file, or are gathered from
// its shard files; each left out stays empty (a ZeRO run reads its own
// slices with a StateReader instead, an export or a teacher needs no moments).
struct ReadParts {
  bool optimizer = true;
  bool ema = true;
};

// Writes `checkpoint` to `path` (created or truncated). Holds the HDF5
// library lock one tensor at a time, so the Loader's reads interleave.
void write_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads a whole checkpoint. UsageError naming the file and the object for a
// file that is not a readable HDF5 file, another format or version, a
// missing or malformed attribute or tensor.
Checkpoint read_checkpoint(const std::string& path, ReadParts parts = {});

// What a checkpoint's weights are, without reading them: for loading one
// tensor at a time (a teacher, an --init).
struct WeightsContents {
  int version = kVersion;
  int64_t step = 0;
  bool ema = false;  // it has an EMA: in /ema, or (sharded_ema) in its shard files
  bool sharded_ema = false;
  std::vector<std::pair<std::string, std::vector<int64_t>>> model;  // /model: names and shapes
  std::vector<GroupRecord> groups = {GroupRecord{}};
  bool groups_recorded = false;
};
WeightsContents read_weights_contents(const std::string& path);
// One tensor of /model or /ema, float32. UsageError naming the file and tensor.
at::Tensor read_weight(const std::string& path, const std::string& group, const std::string& name);

// The /trainer attributes only (no tensors): e.g. the validation loss of `best`.
TrainerState read_trainer_state(const std::string& path);

// The model_config attribute only (no tensors): e.g. the config of a teacher checkpoint.
std::string read_model_config(const std::string& path);
// The run_options attribute only: the run's resolved options as JSON
// ({"shift": "20", ...}), e.g. what a sampler should default to.
std::string read_run_options(const std::string& path);
// The /objective group only: its kind ("flow-matching", "few-step", ...)
// and state, e.g. a few-step student's sampler.
struct ObjectiveRecord {
  std::string kind = "flow-matching";
  std::map<std::string, std::string> state;
};
ObjectiveRecord read_objective(const std::string& path);

// UsageError naming the file, `config_path` and the first field that differs
// when `saved_json` (a checkpoint's model_config) is not `config`.
void check_model_config(const std::string& saved_json, const std::string& path, const std::string& config_json,
                        const std::string& config_path);

// Whether `path` is an HDF5 file (so --init and the like take it as a checkpoint).
bool is_checkpoint_file(const std::string& path);

// Checks that `checkpoint` (read from `path`) fits a model with these
// parameters: every tensor present under /model (/optim when it has AdamW
// state) with the parameter's shape, and under /ema those of
// `ema_parameters` (the ones the run averages; empty: no EMA is read),
// nothing extra. UsageError naming the file and the first offending tensor.
void check_fits(const Checkpoint& checkpoint, const std::string& path, const NamedTensors& parameters,
                const NamedTensors& ema_parameters);

// Copies each tensor of `saved` into the tensor of `into` with the same name
// (every name of `into` must be in `saved`, with its shape: check_fits).
void copy_named(const NamedTensors& saved, const NamedTensors& into);

}  // namespace wt::ckpt
