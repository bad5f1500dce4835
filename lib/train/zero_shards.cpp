#include "wantrain/train/zero_shards.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "wantrain/distributed/reducer.hpp"
#include "wantrain/util/error.hpp"

namespace wt::train {
namespace {

// A released unit keeps its tensor (and the parameters their views of it)
// with no memory behind it; a gather gives the same storage new memory.
void free_memory(const at::Tensor& flat) {
  auto* storage = flat.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, flat.device()));
  storage->set_nbytes(0);
}

void give_memory(const at::Tensor& flat) {
  const c10::DeviceGuard on(flat.device());  // the allocator's device is the current one
  auto* storage = flat.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(flat.numel()) * flat.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

std::string block_unit(const std::string& prefix, int64_t block) { return fmt::format("{}blocks.{}", prefix, block); }

}  // namespace

std::string group_unit(const std::string& prefix, const std::string& name) {
  return prefix + nn::parameter_unit(name.substr(prefix.size()));
}

// The units of one group's model: ZeroShards' own calls, for that group's prefix.
class ZeroShards::GroupUnits : public nn::ParameterUnits {
 public:
  GroupUnits(ZeroShards& shards, std::string prefix) : shards_(shards), prefix_(std::move(prefix)) {}
  void begin_forward() override { shards_.begin_forward(prefix_); }
  void before_block(int64_t block) override { shards_.before_block(prefix_, block); }
  at::Tensor after_block(int64_t block, const at::Tensor& output) override {
    return shards_.after_block(prefix_, block, output);
  }
  void end_forward() override { shards_.end_forward(prefix_); }

 private:
  ZeroShards& shards_;
  const std::string prefix_;
};

ZeroShards::~ZeroShards() = default;

ZeroShards::ZeroShards(distributed::Comm& comm, const distributed::Reducer& reducer, const NamedTensors& trainable,
                       ZeroShardsOptions options)
    : comm_(comm), options_(options), trainable_(trainable) {
  torch::NoGradGuard no_grad;
  if (options_.gather_dtype != at::kFloat && options_.gather_dtype != at::kBFloat16)
    throw SettingError("gather_dtype", fmt::format("is {}; weights are gathered in fp32 or bf16",
                                                   c10::toString(options_.gather_dtype)));
  const int ranks = comm.size(), rank = comm.rank();
  const auto prefix_of = [this](const std::string& name) {
    return options_.prefix_of ? options_.prefix_of(name) : std::string();
  };
  const auto unit_of = [&](const std::string& name) {
    return options_.unit_of ? options_.unit_of(name) : group_unit(prefix_of(name), name);
  };
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < trainable_.size(); ++i) index.emplace(trainable_[i].first, i);
  places_.resize(trainable_.size());
  const auto layouts = reducer.bucket_layouts();
  for (size_t b = 0; b < layouts.size(); ++b) {
    const auto& layout = layouts[b];
    const at::Tensor& first = trainable_[index.at(layout.entries.front().name)].second;
    const std::string prefix = prefix_of(layout.entries.front().name);
    const std::string unit = unit_of(layout.entries.front().name);
    const std::string model_unit = unit.substr(prefix.size());
    // The weights as they are (fp32), laid out as the bucket.
    auto master = torch::zeros({layout.numel}, first.options().requires_grad(false));  // [numel]
    const int64_t shard = layout.numel / ranks, begin = rank * shard, end = begin + shard;
    for (const auto& e : layout.entries) {
      const at::Tensor& parameter = trainable_[index.at(e.name)].second;
      if (options_.release_weights && unit_of(e.name) != unit)
        throw Error(fmt::format("ZeroShards: bucket {} mixes units '{}' and '{}'", b, unit, unit_of(e.name)));
      master.narrow(0, e.offset, e.numel).view(parameter.sizes()).copy_(parameter.detach());
    }
    // Stage 3 gathers the blocks in the gather dtype and keeps the root in
    // fp32 (the time embedding and head compute in fp32).
    const auto gathered_dtype =
        options_.release_weights && !nn::root_unit(model_unit) ? options_.gather_dtype : master.scalar_type();
    Unit u;
    u.flat = gathered_dtype == master.scalar_type() ? master : master.to(gathered_dtype);
    for (const auto& e : layout.entries) {
      const size_t i = index.at(e.name);
      at::Tensor& parameter = trainable_[i].second;
      parameter.set_data(u.flat.narrow(0, e.offset, e.numel).view(parameter.sizes()));
      places_[i] = {b, e.offset};
      const int64_t from = std::max(begin, e.offset), to = std::min(end, e.offset + e.numel);
      if (from < to) pieces_.push_back({e.name, b, from - begin, from - e.offset, to - from, e.numel});
    }
    auto slice = master.narrow(0, begin, shard);
    shards_.push_back(options_.release_weights ? slice.clone() : slice);
    units_.push_back(std::move(u));
    buckets_of_unit_[unit].push_back(b);
    auto& blocks = blocks_[prefix];
    if (!nn::root_unit(model_unit))
      blocks = std::max(blocks, int64_t(std::stoll(model_unit.substr(model_unit.find('.') + 1))) + 1);
    if (!nn::root_unit(model_unit) && model_unit.rfind("blocks.", 0) != 0)
      throw Error(fmt::format("ZeroShards: unit '{}' is neither a block ('blocks.<i>') nor the root", unit));
    if (!prefix.empty() && !group_units_.count(prefix))
      group_units_.emplace(prefix, std::make_unique<GroupUnits>(*this, prefix));
  }
  for (size_t i = 0; i < trainable_.size(); ++i)
    if (!trainable_[i].second.requires_grad())
      throw Error(fmt::format("ZeroShards: trainable parameter {} does not require grad", trainable_[i].first));
  if (!options_.release_weights) return;
  for (auto& u : units_) {
    free_memory(u.flat);
    u.gathered = false;
  }
}

void ZeroShards::all_gather_parameters() {
  torch::NoGradGuard no_grad;
  if (options_.release_weights) return;  // the next forward gathers the new slices
  std::vector<distributed::WorkPtr> works;
  for (size_t b = 0; b < units_.size(); ++b) works.push_back(comm_.all_gather_async(units_[b].flat, shards_[b]));
  for (auto& work : works) work->wait();
}

NamedTensors ZeroShards::gather(const std::vector<at::Tensor>& slices, int rank) const {
  const bool keep = rank < 0 || rank == comm_.rank();
  NamedTensors out(keep ? trainable_.size() : 0);
  gather_each(slices, [&](const std::string& name, const at::Tensor& whole) {
    if (!keep) return;
    for (size_t i = 0; i < trainable_.size(); ++i)
      if (trainable_[i].first == name) out[i] = {name, whole.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)};
  });
  // In the trainable order, without what was left out.
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& item) { return !item.second.defined(); }), out.end());
  return out;
}

void ZeroShards::gather_each(const std::vector<at::Tensor>& slices,
                             const std::function<void(const std::string& name, const at::Tensor& whole)>& use,
                             const std::function<bool(const std::string& name)>& wanted) const {
  torch::NoGradGuard no_grad;
  auto is_wanted = [&](size_t i) { return !wanted || wanted(trainable_[i].first); };
  for (size_t b = 0; b < units_.size(); ++b) {
    if (!slices[b].defined()) continue;
    bool any = false;
    for (size_t i = 0; i < trainable_.size() && !any; ++i) any = places_[i].bucket == b && is_wanted(i);
    if (!any) continue;
    auto whole = torch::empty({units_[b].flat.numel()}, slices[b].options());
    comm_.all_gather(whole, slices[b].contiguous());
    for (size_t i = 0; i < trainable_.size(); ++i) {
      if (places_[i].bucket != b || !is_wanted(i)) continue;
      const auto& [name, parameter] = trainable_[i];
      use(name, whole.narrow(0, places_[i].offset, parameter.numel()).view(parameter.sizes()));
    }
  }
}

void ZeroShards::gather_async(size_t bucket, const at::Tensor* from) {
  Unit& u = units_[bucket];
  if (u.gathered || u.work) return;
  torch::NoGradGuard no_grad;
  give_memory(u.flat);
  gathered_bytes_ += u.flat.nbytes();
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  const auto& slice = from && from->defined() ? *from : shards_[bucket];
  u.staging = slice.scalar_type() == u.flat.scalar_type() ? slice : slice.to(u.flat.scalar_type());
  u.work = comm_.all_gather_async(u.flat, u.staging);
}

void ZeroShards::wait(size_t bucket) {
  Unit& u = units_[bucket];
  if (!u.work) return;
  const auto start = std::chrono::steady_clock::now();
  u.work->wait();
  gather_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  u.work.reset();
  u.staging = at::Tensor();
  u.gathered = true;
}

void ZeroShards::release(size_t bucket) {
  Unit& u = units_[bucket];
  if (!u.gathered && !u.work) return;
  wait(bucket);  // the collective writes into the memory until it completes
  free_memory(u.flat);
  u.gathered = false;
  gathered_bytes_ -= u.flat.nbytes();
}

nn::ParameterUnits* ZeroShards::units(const std::string& prefix) {
  if (prefix.empty()) return this;
  const auto it = group_units_.find(prefix);
  return it == group_units_.end() ? nullptr : it->second.get();
}

int64_t ZeroShards::blocks(const std::string& prefix) const {
  const auto it = blocks_.find(prefix);
  return it == blocks_.end() ? 0 : it->second;
}

void ZeroShards::gather_unit(const std::string& unit) {
  const auto it = buckets_of_unit_.find(unit);
  if (it == buckets_of_unit_.end()) return;  // no trained parameters in it
  for (size_t b : it->second) gather_async(b);
  for (size_t b : it->second) wait(b);
}

void ZeroShards::prefetch_unit(const std::string& unit) {
  const auto it = buckets_of_unit_.find(unit);
  if (it != buckets_of_unit_.end())
    for (size_t b : it->second) gather_async(b);
}

void ZeroShards::release_unit(const std::string& unit) {
  const auto it = buckets_of_unit_.find(unit);
  if (it != buckets_of_unit_.end())
    for (size_t b : it->second) release(b);
}

void ZeroShards::begin_forward() { begin_forward(""); }
void ZeroShards::before_block(int64_t block) { before_block("", block); }
at::Tensor ZeroShards::after_block(int64_t block, const at::Tensor& output) { return after_block("", block, output); }
void ZeroShards::end_forward() { end_forward(""); }

int64_t ZeroShards::next_block(const std::string& prefix, int64_t block, int64_t step) const {
  // A group may train some blocks only (a VACE branch: those with a VACE block).
  for (int64_t b = block + step; b >= 0 && b < blocks(prefix); b += step)
    if (buckets_of_unit_.count(block_unit(prefix, b))) return b;
  return -1;
}

void ZeroShards::begin_forward(const std::string& prefix) {
  if (!options_.release_weights || whole_) return;
  prefetch_unit(prefix + "head");
  gather_unit(prefix);
  if (const int64_t first = next_block(prefix, -1, 1); first >= 0) prefetch_unit(block_unit(prefix, first));
}

void ZeroShards::before_block(const std::string& prefix, int64_t block) {
  if (!options_.release_weights || whole_) return;
  gather_unit(block_unit(prefix, block));
  if (const int64_t next = next_block(prefix, block, 1); next >= 0) prefetch_unit(block_unit(prefix, next));
}

at::Tensor ZeroShards::after_block(const std::string& prefix, int64_t block, const at::Tensor& output) {
  if (!options_.release_weights || whole_) return output;
  const bool backward = at::GradMode::is_enabled() && output.requires_grad();
  if (backward) {
    // Runs when the block's output gradient is complete, before any of the
    // block's own backward (a checkpointed block's recomputation included).
    at::Tensor hooked = output;
    hooked.register_hook([this, prefix, block](const at::Tensor&) {
      gather_unit(block_unit(prefix, block));
      if (const int64_t previous = next_block(prefix, block, -1); previous >= 0)
        prefetch_unit(block_unit(prefix, previous));
    });
  }
  // The last block's backward comes first: it stays.
  if (!(backward && block + 1 == blocks(prefix))) release_unit(block_unit(prefix, block));
  return output;
}

void ZeroShards::end_forward(const std::string& prefix) {
  if (!options_.release_weights || whole_) return;
  if (!at::GradMode::is_enabled()) {
    release_unit(prefix);
    release_unit(prefix + "head");
  }
}

void ZeroShards::bucket_ready(size_t bucket) {
  if (options_.release_weights && !whole_) release(bucket);
}

void ZeroShards::release_all() {
  if (!options_.release_weights || whole_) return;
  for (size_t b = 0; b < units_.size(); ++b) release(b);
}

void ZeroShards::gather_whole(const std::vector<at::Tensor>* slices) {
  if (!options_.release_weights) return;
  if (whole_) throw Error("ZeroShards: the whole weights are held already (WholeWeights does not nest)");
  release_all();  // a unit gathered from the weights is not the EMA's
  for (size_t b = 0; b < units_.size(); ++b) gather_async(b, slices ? &(*slices)[b] : nullptr);
  for (size_t b = 0; b < units_.size(); ++b) wait(b);
  whole_ = true;
}

void ZeroShards::release_whole() {
  if (!options_.release_weights) return;
  whole_ = false;
  release_all();
}

}  // namespace wt::train
