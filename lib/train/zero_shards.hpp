// ZeroShards: ZeRO stages 1 to 3 over the Reducer's gradient buckets.
//
// Stages 1 and 2. The trainable parameters become views into flat buffers
// laid out exactly as the Reducer's (sharding) buckets, padding included,
// so that rank r's slice r of a bucket holds the same elements of the
// weights as the reduced gradient shard it receives. The optimizer and the
// EMA work on these slices only: 1/W of their state per rank. After the
// update an in-place all-gather per bucket gives every rank the whole new
// weights.
//
// Stage 3 (`release_weights`). The buckets are the model's units
// (nn/parameter_units.hpp: a block, or a run of root parameters), and the
// fp32 slices are this rank's only copy of the weights: a unit's flat buffer
// (in `gather_dtype` for the blocks, fp32 for the root) has memory only
// while the unit is gathered. The parameters stay views into it, so the
// tensors autograd saved in forward read the weights gathered again before
// backward. A unit is gathered before its forward (the next one's gather in
// flight), released after it, gathered again by a hook on its output's
// gradient (the previous one's prefetched), and released once the Reducer
// has every gradient of it (on_bucket_ready). The update needs no
// all-gather: the next forward gathers the new slices. With several trained
// groups (parameter_group.hpp) each group's units are its own: a unit is
// named by the group's checkpoint prefix and the model's unit, and each
// model's forward calls the units() of its group.
//
// Collective contract: constructed on every rank after the Reducer (whose
// broadcast made the weights equal), over the same parameters; every rank
// runs the same forwards and backwards, so the gathers match.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/train/objective.hpp"

namespace wt::distributed {
class Reducer;
}  // namespace wt::distributed

namespace wt::train {

struct ZeroShardsOptions {
  bool release_weights = false;              // stage 3
  at::ScalarType gather_dtype = at::kFloat;  // stage 3: the blocks' gathered weights (kFloat or kBFloat16)
  // The checkpoint prefix of the group a parameter (by its name in
  // `trainable`) belongs to; empty: one group, prefix "".
  std::function<std::string(const std::string& name)> prefix_of;
  // Stage 3: the unit of a parameter (by its name in `trainable`: the
  // group's prefix and the model's unit, as the Reducer's unit_of);
  // unset: group_unit(prefix_of(name), name).
  std::function<std::string(const std::string& name)> unit_of;
};

// The stage 3 unit of a parameter named `name` in the trainable list, whose
// group's checkpoint prefix is `prefix`: the prefix and the model's unit.
std::string group_unit(const std::string& prefix, const std::string& name);

class ZeroShards : public nn::ParameterUnits {
 public:
  // Elements [param_offset, param_offset + count) of parameter `name`
  // (numel elements in all) lie at shard_offset in this rank's slice of `bucket`.
  struct Piece {
    std::string name;
    size_t bucket = 0;
    int64_t shard_offset = 0, param_offset = 0, count = 0, numel = 0;
  };

  // Re-points each parameter in `trainable` at its place in the flat buffers
  // (Tensor::set_data: the same parameter objects, now views). With stage 3
  // the weights are then released: call Reducer::refresh_accumulators()
  // after (a bf16 gather dtype changes the parameters' dtype).
  ZeroShards(distributed::Comm& comm, const distributed::Reducer& reducer, const NamedTensors& trainable,
             ZeroShardsOptions options = {});
  ~ZeroShards() override;

  // Per bucket, this rank's slice of the weights: [bucket numel / W] (views
  // of the flat buffers, or with stage 3 tensors of their own).
  const std::vector<at::Tensor>& parameter_shards() const { return shards_; }
  // The parameters' parts in this rank's slices, bucket by bucket.
  const std::vector<Piece>& pieces() const { return pieces_; }

  // Stages 1 and 2, collective: every rank's updated slices, into every rank's weights.
  void all_gather_parameters();
  // Collective: per-bucket slices laid out like parameter_shards() (the
  // EMA's, say), gathered whole and cut into tensors shaped like the
  // parameters, by name, on the CPU (one bucket at a time on the device);
  // with `rank` >= 0 only that rank keeps them (the others get an empty list).
  // A bucket whose slice is undefined (a group without an EMA) is left out.
  NamedTensors gather(const std::vector<at::Tensor>& slices, int rank = -1) const;
  // Collective: the same one bucket at a time, handing each parameter to
  // `use` while only its bucket is whole; with `wanted`, only the
  // parameters it names, and no bucket that holds none of them is gathered
  // (the same names on every rank).
  void gather_each(const std::vector<at::Tensor>& slices,
                   const std::function<void(const std::string& name, const at::Tensor& whole)>& use,
                   const std::function<bool(const std::string& name)>& wanted = {}) const;

  // Stage 3. nn::ParameterUnits, for the forward of the model whose group's
  // checkpoint prefix is "" (the run's model); units(prefix) for another
  // group's model (nullptr when no group has that prefix).
  nn::ParameterUnits* units(const std::string& prefix);
  void begin_forward() override;
  void before_block(int64_t block) override;
  at::Tensor after_block(int64_t block, const at::Tensor& output) override;
  void end_forward() override;
  // The Reducer has every gradient of `bucket`: its weights are not read again.
  void bucket_ready(size_t bucket);
  // After a backward: every unit released (one whose gradients did not all arrive, too).
  void release_all();
  // Collective: every unit gathered until release_whole(), for forwards that
  // not every rank runs or not as often (validation, the training sample);
  // the units' calls do nothing meanwhile. From `slices` laid out like
  // parameter_shards() (the EMA's) instead of the weights, when given (a
  // bucket whose slice is undefined from its weights).
  void gather_whole(const std::vector<at::Tensor>* slices = nullptr);
  void release_whole();
  // Bytes of gathered weights now, and the most at once since construction.
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  // Seconds spent waiting for gathers (not hidden behind compute) since the last call.
  double take_gather_wait_seconds() { return std::exchange(gather_wait_seconds_, 0.0); }
  double take_wait_seconds() override { return take_gather_wait_seconds(); }

 private:
  struct Unit {
    at::Tensor flat;     // [numel] in the gather dtype; memory only while gathered (stage 3)
    at::Tensor staging;  // the slice in the gather dtype, while its gather is in flight
    distributed::WorkPtr work;
    bool gathered = true;
  };
  class GroupUnits;
  void gather_async(size_t bucket, const at::Tensor* from = nullptr);
  void wait(size_t bucket);
  void release(size_t bucket);
  void gather_unit(const std::string& unit);  // started and waited for
  void prefetch_unit(const std::string& unit);
  void release_unit(const std::string& unit);
  // nn::ParameterUnits for the group whose checkpoint prefix is `prefix`.
  void begin_forward(const std::string& prefix);
  void before_block(const std::string& prefix, int64_t block);
  at::Tensor after_block(const std::string& prefix, int64_t block, const at::Tensor& output);
  void end_forward(const std::string& prefix);
  int64_t blocks(const std::string& prefix) const;
  // The nearest block after (step 1) or before (step -1) `block` that has
  // a unit in the group, or -1.
  int64_t next_block(const std::string& prefix, int64_t block, int64_t step) const;

  distributed::Comm& comm_;
  ZeroShardsOptions options_;
  NamedTensors trainable_;
  std::vector<Unit> units_;         // per bucket
  std::vector<at::Tensor> shards_;  // per bucket [numel / W]
  std::vector<Piece> pieces_;
  struct Place {
    size_t bucket;
    int64_t offset;
  };
  std::vector<Place> places_;  // of trainable_[i] in the flat buffers
  std::map<std::string, std::vector<size_t>> buckets_of_unit_;
  std::map<std::string, int64_t> blocks_;                           // by group prefix
  std::map<std::string, std::unique_ptr<GroupUnits>> group_units_;  // by prefix, other than ""

  bool whole_ = false;
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  double gather_wait_seconds_ = 0;
};

}  // namespace wt::train
