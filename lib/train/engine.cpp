#include "wantrain/train/engine.hpp"

#include <fmt/format.h>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <utility>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/data/copy_fence.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/reducer.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/train/adamw_step.hpp"
#include "wantrain/train/gradients.hpp"
#include "wantrain/train/loss_scaler.hpp"
#include "wantrain/train/zero_shards.hpp"
#include "wantrain/util/seconds.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/test_hooks.hpp"

namespace wt::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSignalSlots = 64;  // signal numbers 1..64 (Linux's, real-time ones included)

std::vector<at::Tensor> tensors_of(const NamedTensors& named) {
  std::vector<at::Tensor> out;
  for (const auto& [name, tensor] : named) out.push_back(tensor);
  return out;
}

// Groups differ in name and in checkpoint prefix: a tensor's checkpoint
// name says which group it is in.
void check_groups(const std::vector<ParameterGroup>& groups) {
  if (groups.empty()) throw Error("Engine: the objective trains no parameter group");
  for (size_t a = 0; a < groups.size(); ++a)
    for (size_t b = a + 1; b < groups.size(); ++b)
      if (groups[a].name == groups[b].name || groups[a].checkpoint_prefix == groups[b].checkpoint_prefix)
        throw Error(fmt::format("Engine: parameter groups '{}' and '{}' share a name or a checkpoint prefix",
                                groups[a].name, groups[b].name));
}

}  // namespace

struct Engine::Impl {
  std::vector<ParameterGroup> groups;      // the objective's (the tensors shared)
  std::map<std::string, size_t> group_of;  // by checkpoint name
  std::vector<size_t> bucket_group;        // per bucket
  std::vector<int> bucket_ema;             // ZeRO: per bucket, its slice's index in the EMA, or -1 (none)
  std::unique_ptr<distributed::Reducer> reducer;
  std::unique_ptr<ZeroShards> zero;  // zero >= 1
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<Ema> ema;
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  // The CPU snapshot's copies, running on their own thread (save_state).
  std::shared_future<void> snapshot;
  // Before anything writes into what the snapshot copies: the update, a load.
  void wait_for_snapshot() {
    if (const auto pending = std::exchange(snapshot, {}); pending.valid()) pending.get();
  }
};

Engine::Engine(distributed::Comm& comm, Objective& objective, EngineOptions options)
    : comm_(comm), objective_(objective), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.groups = objective_.groups();
  check_groups(im.groups);
  const auto named = objective_.trainable();
  for (size_t g = 0; g < im.groups.size(); ++g)
    for (const auto& [name, tensor] : im.groups[g].parameters)
      im.group_of.emplace(im.groups[g].checkpoint_prefix + name, g);
  auto group_of = [group_of = im.group_of](const std::string& name) { return group_of.at(name); };
  auto prefix_of = [group_of, groups = im.groups](const std::string& name) {
    return groups[group_of(name)].checkpoint_prefix;
  };
  distributed::ReducerOptions reducer_options;
  reducer_options.bucket_bytes = options_.bucket_bytes;
  reducer_options.comm_dtype = options_.grad_comm_dtype;
  reducer_options.allow_unused = options_.allow_unused;
  reducer_options.average = false;  // the loss is divided by the world size: the gradient's sum is the mean
  if (options_.zero < 0 || options_.zero > 3)
    throw SettingError("zero", fmt::format("is {}; stages 0 to 3 exist", options_.zero));
  if (options_.zero > 0 && !options_.communicate)
    throw Error("Engine: ZeRO needs communication (its gradients arrive by reduce-scatter)");
  if (options_.sequence_parallel < 1 || comm.size() % options_.sequence_parallel != 0)
    throw SettingError("sp",
                       fmt::format("is {}; it must divide the {} ranks", options_.sequence_parallel, comm.size()));
  reducer_options.shard = options_.zero >= 1;
  reducer_options.transient_buckets = options_.zero >= 2;
  if (im.groups.size() > 1)
    reducer_options.group_of = [group_of](const std::string& name) { return std::to_string(group_of(name)); };
  // ZeRO-3's unit of a parameter by its checkpoint name: its group's prefix and the model's unit.
  auto unit_of = [group_of, groups = im.groups](const std::string& name) {
    const auto& group = groups[group_of(name)];
    if (!group.unit_of) return group_unit(group.checkpoint_prefix, name);
    return group.checkpoint_prefix + group.unit_of(name.substr(group.checkpoint_prefix.size()));
  };
  if (options_.zero == 3) {
    reducer_options.unit_of = unit_of;
    reducer_options.on_bucket_ready = [im = impl_.get()](size_t bucket) {
      if (im->zero) im->zero->bucket_ready(bucket);
    };
  }
  im.reducer = std::make_unique<distributed::Reducer>(comm, named, objective_.buffers(), reducer_options);
  for (const auto& layout : im.reducer->bucket_layouts())
    im.bucket_group.push_back(group_of(layout.entries.front().name));
  // What AdamW and the EMA update, by group: the parameters, or this rank's
  // slices of them (with their gradient slices attached as .grad).
  std::vector<NamedTensors> updated(im.groups.size());
  if (options_.zero >= 1) {
    ZeroShardsOptions shards;
    shards.release_weights = options_.zero == 3;
    shards.gather_dtype = options_.gather_dtype;
    shards.prefix_of = prefix_of;
    shards.unit_of = unit_of;
    im.zero = std::make_unique<ZeroShards>(comm, *im.reducer, named, shards);
    if (shards.release_weights) im.reducer->refresh_accumulators();
    const auto gradients = im.reducer->gradient_shards();
    for (size_t b = 0; b < gradients.size(); ++b) {
      at::Tensor slice = im.zero->parameter_shards()[b];
      slice.mutable_grad() = gradients[b];
      updated[im.bucket_group[b]].emplace_back(fmt::format("bucket {}", b), slice);
    }
  } else {
    for (const auto& item : named) updated[group_of(item.first)].push_back(item);
  }
  // One AdamW, a parameter group per trained group.
  NamedTensors averaged;
  for (size_t g = 0; g < im.groups.size(); ++g) {
    const auto& group = im.groups[g];
    const auto& adamw = group.adamw.value_or(options_.adamw);
    const auto settings = torch::optim::AdamWOptions(options_.schedule.at(0) * group.lr_scale)
                              .betas({adamw.beta1, adamw.beta2})
                              .weight_decay(adamw.weight_decay)
                              .eps(adamw.eps);
    if (!im.optimizer)
      im.optimizer = std::make_unique<torch::optim::AdamW>(tensors_of(updated[g]), settings);
    else
      im.optimizer->add_param_group(torch::optim::OptimizerParamGroup(
          tensors_of(updated[g]), std::make_unique<torch::optim::AdamWOptions>(settings)));
    if (group.ema) averaged.insert(averaged.end(), updated[g].begin(), updated[g].end());
  }
  if (im.zero) {  // which EMA slice is each bucket's
    im.bucket_ema.assign(im.bucket_group.size(), -1);
    int next = 0;
    for (size_t g = 0; g < im.groups.size(); ++g)
      for (size_t b = 0; b < im.bucket_group.size(); ++b)
        if (im.bucket_group[b] == g && im.groups[g].ema) im.bucket_ema[b] = next++;
  }
  if (options_.ema_decay > 0 && !averaged.empty()) im.ema = std::make_unique<Ema>(averaged, options_.ema_decay);
  if (options_.compute_dtype == at::kHalf) im.scaler = std::make_unique<LossScaler>();
}

Engine::~Engine() = default;

const Ema* Engine::ema() const { return impl_->ema.get(); }

int64_t Engine::state_bytes() const {
  const auto& im = *impl_;
  int64_t bytes = 0;
  for (const auto& [key, state] : im.optimizer->state()) {
    const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*state);
    bytes += adam.exp_avg().nbytes() + adam.exp_avg_sq().nbytes();
  }
  if (im.ema)
    for (const auto& [name, average] : im.ema->averages()) bytes += average.nbytes();
  return bytes;
}

int64_t Engine::gradient_bytes() const { return impl_->reducer->gradient_bytes(); }

nn::ParameterUnits* Engine::parameter_units(size_t group) const {
  if (options_.zero != 3) return nullptr;
  return impl_->zero->units(impl_->groups.at(group).checkpoint_prefix);
}

const std::vector<ParameterGroup>& Engine::groups() const { return impl_->groups; }

std::vector<at::Tensor> Engine::slices_of_model(bool ema) const {
  const auto& im = *impl_;
  std::vector<at::Tensor> slices(im.bucket_group.size());
  for (size_t b = 0; b < slices.size(); ++b) {
    if (!im.groups[im.bucket_group[b]].weights) continue;
    const bool averaged = ema && im.ema && im.bucket_ema[b] >= 0;
    slices[b] = averaged ? im.ema->averages()[im.bucket_ema[b]].second : im.zero->parameter_shards()[b];
  }
  return slices;
}

NamedTensors Engine::model_names(const NamedTensors& checkpoint_named) const {
  const auto& im = *impl_;
  NamedTensors out;
  for (const auto& [name, tensor] : checkpoint_named) {
    const auto& group = im.groups[im.group_of.at(name)];
    if (group.weights) out.emplace_back(name.substr(group.checkpoint_prefix.size()), tensor);
  }
  return out;
}

NamedTensors Engine::weights(int rank) const {
  if (options_.zero != 3)
    return rank < 0 || rank == comm_.rank() ? model_names(objective_.trainable()) : NamedTensors{};
  return model_names(impl_->zero->gather(slices_of_model(/*ema=*/false), rank));
}

int64_t Engine::weight_bytes() const {
  int64_t bytes = 0;
  if (options_.zero != 3) {
    for (const auto& [name, parameter] : objective_.trainable()) bytes += parameter.nbytes();
    return bytes;
  }
  for (const auto& slice : impl_->zero->parameter_shards()) bytes += slice.nbytes();
  return bytes + impl_->zero->gathered_bytes();
}

WholeWeights::WholeWeights(Engine& engine, bool ema) : engine_(engine) {
  if (engine_.options_.zero != 3) return;
  auto& im = *engine_.impl_;
  if (!ema || !im.ema) {
    im.zero->gather_whole();
    return;
  }
  // The averaged groups' EMA; the other groups' weights.
  std::vector<at::Tensor> slices(im.bucket_group.size());
  for (size_t b = 0; b < slices.size(); ++b)
    if (im.bucket_ema[b] >= 0) slices[b] = im.ema->averages()[im.bucket_ema[b]].second;
  im.zero->gather_whole(&slices);
}

WholeWeights::~WholeWeights() {
  if (engine_.options_.zero == 3) engine_.impl_->zero->release_whole();
}

NamedTensors Engine::ema_weights(int rank) const {
  const auto& im = *impl_;
  if (!im.ema) return {};
  if (!im.zero) return rank < 0 || rank == comm_.rank() ? model_names(im.ema->averages()) : NamedTensors{};
  std::vector<at::Tensor> slices(im.bucket_group.size());
  for (size_t b = 0; b < slices.size(); ++b)
    if (im.bucket_ema[b] >= 0 && im.groups[im.bucket_group[b]].weights)
      slices[b] = im.ema->averages()[im.bucket_ema[b]].second;
  return model_names(im.zero->gather(slices, rank));
}

void Engine::each_sampling_weight(
    const std::function<void(const std::string& name, const at::Tensor& whole)>& use) const {
  const auto& im = *impl_;
  auto use_model = [&](const std::string& name, const at::Tensor& whole) {
    const auto& group = im.groups[im.group_of.at(name)];
    if (group.weights) use(name.substr(group.checkpoint_prefix.size()), whole);
  };
  const bool whole_here = !im.zero || (options_.zero != 3 && !im.ema);
  if (!whole_here) {
    im.zero->gather_each(slices_of_model(/*ema=*/true), use_model);
    return;
  }
  std::map<std::string, at::Tensor> averages;
  if (im.ema) averages.insert(im.ema->averages().begin(), im.ema->averages().end());
  for (const auto& [name, tensor] : objective_.trainable()) {
    const auto it = averages.find(name);
    use_model(name, it != averages.end() ? it->second : tensor);
  }
}

at::Tensor Engine::accumulate(const Batch& batch, double loss_scale, StepTimes& t) {
  auto& im = *impl_;
  const auto device = comm_.device();
  const int K = options_.accumulation;
  const int64_t B = options_.micro_batch;
  im.reducer->zero_grad();
  auto loss_sum = torch::zeros({}, torch::dtype(torch::kFloat64).device(device));
  for (int m = 0; m < K; ++m) {
    auto phase = Clock::now();
    const Batch micro = batch.slice(m * B, B, device);
    t.data += seconds_since(phase);

    phase = Clock::now();
    // ZeRO-2 keeps no whole gradient to accumulate in: every micro-step reduces.
    const bool sync = options_.communicate && (m == K - 1 || options_.zero >= 2);
    im.reducer->prepare_for_backward(sync);
    ObjectiveLoss out;
    {
      nn::AutocastScope autocast(options_.compute_dtype, device.type());
      out = objective_.loss(micro, {step_});
    }
    t.data += out.prepare_seconds;
    t.teacher += out.teacher_seconds;
    t.forward += seconds_since(phase) - out.prepare_seconds - out.teacher_seconds;

    phase = Clock::now();
    const int data_parallel = comm_.size() / options_.sequence_parallel;
    (out.loss * (loss_scale / (K * data_parallel))).backward();
    loss_sum += out.loss.detach().to(torch::kFloat64);
    t.backward += seconds_since(phase);

    // Waiting for the buckets backward did not finish: the communication
    // left exposed.
    phase = Clock::now();
    im.reducer->finalize_backward_unchecked();
    if (options_.zero == 3) im.zero->release_all();
    if (sync) t.comm += seconds_since(phase);
  }
  return loss_sum;
}

StepResult Engine::step(const Batch& batch, const StepFlags& flags) {
  auto& im = *impl_;
  const auto step_start = Clock::now();
  StepResult result;
  StepTimes& t = result.times;
  const auto device = comm_.device();
  const int K = options_.accumulation;
  const int64_t B = options_.micro_batch;
  TORCH_CHECK(batch.size() == B * K, "the engine's batch holds micro_batch x accumulation samples");
  const double loss_scale = im.scaler ? im.scaler->scale() : 1.0;

  const at::Tensor loss_sum = accumulate(batch, loss_scale, t);
  if (options_.zero == 3) t.gather = im.zero->take_gather_wait_seconds();
  if (watched_units_) t.gather += watched_units_->take_wait_seconds();

  // The step's figures in one reduction and one host read, so that a GPU
  // run's host waits for the device once per step: [loss, parameters
  // without a gradient, with ZeRO each bucket slice's sum of squares],
  // summed over ranks, then read together with this rank's bucket norms
  // (whole gradients, identical on every rank without ZeRO). The loss
  // averaged over ranks and the gradient norm decide a skip, so every rank
  // decides alike.
  auto phase = Clock::now();
  // The reduced gradients: whole on every rank, or this rank's slices.
  const auto buffers = im.zero ? im.reducer->gradient_shards() : im.reducer->bucket_buffers();
  if (im.scaler) scale_gradients(buffers, 1.0 / loss_scale);
  const auto norms = bucket_norms(buffers).to(device);  // [buckets]
  const auto figures = torch::dtype(torch::kFloat64).device(device);
  // The flags as counts, so that one Sum carries them: [write failed] and
  // one slot per signal number, the highest counted one winning. Filled on
  // the device (kernels with scalar arguments): no host-to-device copy.
  auto flag_counts = torch::zeros({1 + kSignalSlots}, figures);
  if (flags.write_failed) flag_counts[0].fill_(1.0);
  const int mine = flags.stop_signal ? flags.stop_signal() : 0;
  if (mine > 0 && mine <= kSignalSlots) flag_counts[mine].fill_(1.0);
  std::vector<at::Tensor> summed = {(loss_sum / K).reshape({1}),
                                    torch::full({1}, double(im.reducer->unused_parameters()), figures), flag_counts};
  if (im.zero) summed.push_back(norms.square());
  auto summary = torch::cat(summed);
  t.optimizer += seconds_since(phase);
  phase = Clock::now();
  if (options_.communicate) comm_.all_reduce(summary, {distributed::ReduceOp::Sum});
  const auto host = (im.zero ? summary : torch::cat({summary, norms})).cpu();  // the step's one host read
  ++result.host_reads;
  (options_.communicate ? t.comm : t.optimizer) += seconds_since(phase);
  const double* v = host.data_ptr<double>();
  const double ranks = options_.communicate ? comm_.size() : 1;
  result.loss = v[0] / ranks;  // as an Avg reduction computes it: the sum, divided once
  im.reducer->check_unused(int64_t(v[1]));
  result.write_failed = v[2] > 0;
  for (int signal = kSignalSlots; signal >= 1 && result.stop_signal == 0; --signal)
    if (v[2 + signal] > 0) result.stop_signal = signal;
  // Each group's norm over its own buckets (in bucket order): its clip's.
  const double* norm_figures = v + 3 + kSignalSlots;
  std::vector<std::vector<at::Tensor>> group_buffers(im.groups.size());
  bool finite = std::isfinite(result.loss);
  for (size_t g = 0; g < im.groups.size(); ++g) {
    std::vector<double> figures;
    for (size_t b = 0; b < buffers.size(); ++b)
      if (im.bucket_group[b] == g) {
        figures.push_back(norm_figures[b]);
        group_buffers[g].push_back(buffers[b]);
      }
    double norm = 0;
    if (im.zero) {
      for (const double squares : figures) norm += squares;
      norm = std::sqrt(norm);
    } else {
      norm = norm_of(figures.data(), figures.size());
    }
    result.group_norms.emplace_back(im.groups[g].name, norm);
    finite = finite && std::isfinite(norm);
  }
  result.grad_norm = result.group_norms.front().second;

  phase = Clock::now();
  result.lr = options_.schedule.at(step_);
  if (finite) {
    for (size_t g = 0; g < im.groups.size(); ++g) {
      clip_to_norm(group_buffers[g], result.group_norms[g].second, im.groups[g].clip.value_or(options_.clip));
      static_cast<torch::optim::AdamWOptions&>(im.optimizer->param_groups()[g].options())
          .lr(result.lr * im.groups[g].lr_scale);
    }
    // Multi-tensor AdamW where it fuses kernels (CUDA); on the CPU, where
    // _foreach_ ops only loop, one fused pass over each parameter
    // (docs/performance.md has both measured against AdamW's loop).
    im.wait_for_snapshot();
    if (device.is_cuda())
      foreach_adamw_step(*im.optimizer);
    else
      fused_adamw_step(*im.optimizer);
    if (im.ema) im.ema->update();
    if (im.zero) im.zero->all_gather_parameters();  // nothing with ZeRO-3: forwards gather
  } else {
    result.skipped = true;
    ++skipped_;
    // An fp16 overflow is the loss scaler's business; anything else is news.
    if (comm_.rank() == 0 && (!im.scaler || !std::isfinite(result.loss)))
      report_warning("step {}: non-finite {}; the step is skipped on every rank", step_ + 1,
                     std::isfinite(result.loss) ? "gradient norm" : "loss");
  }
  if (im.scaler) im.scaler->update(finite);
  if (im.scaler) result.loss_scale = im.scaler->scale();
  t.optimizer += seconds_since(phase);

  result.step = ++step_;
  t.total = seconds_since(step_start);
  return result;
}

namespace {

// The copies of a state snapshot (Engine::save_state): each tensor into
// its slot as fp32 on the CPU, reusing the slot's buffer (the previous
// checkpoint's, from the writer) when it fits. From a GPU new slots are
// page-locked and their copies queued, one wait at the end covering them
// all; since the slots live for the whole run and the OS cannot swap them,
// at most kPinnedBudget is pinned and the rest of a larger snapshot is
// copied into ordinary memory, blocking. On the CPU the copies run on a
// thread of their own while the next step's forward and backward (which
// only read these tensors) go on; the step's update and the writer wait
// for them.
class SnapshotCopies {
 public:
  explicit SnapshotCopies(bool from_device) : from_device_(from_device) {}

  bool from_device() const { return from_device_; }

  void put(at::Tensor& slot, const at::Tensor& t) {
    const bool fits = slot.defined() && slot.sizes() == t.sizes() && slot.scalar_type() == at::kFloat && slot.is_cpu();
    if (!fits) {
      const bool pin = from_device_ && pinned_ + t.numel() * 4 <= kPinnedBudget;
      slot = at::empty(t.sizes(), at::TensorOptions(at::kFloat).pinned_memory(pin));
    }
    if (!from_device_) {
      deferred_.emplace_back(slot, t.detach());
      return;
    }
    const bool queued = slot.is_pinned();
    if (queued) pinned_ += slot.numel() * 4;
    slot.copy_(t.detach(), /*non_blocking=*/queued);
  }

  void put_all(ckpt::NamedTensors& list, const NamedTensors& from) {
    list.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i) {
      list[i].first = from[i].first;
      put(list[i].second, from[i].second);
    }
  }

  // On the CPU: the copies started on their own thread, and what the
  // checkpoint's readers wait for. From a GPU: the queued copies waited for
  // (the writer thread reads the slots once save_state returns).
  std::shared_future<void> start(const at::Device& device) {
    if (!from_device_)
      return std::async(std::launch::async,
                        [copies = std::move(deferred_)] {
                          at::init_num_threads();
                          test_delay("snapshot_copy");
                          for (const auto& [slot, source] : copies) slot.copy_(source);
                        })
          .share();
    data::CopyFence copied;
    copied.record(device);
    copied.wait();
    return {};
  }

 private:
  static constexpr int64_t kPinnedBudget = int64_t(8) << 30;
  const bool from_device_;
  int64_t pinned_ = 0;
  std::vector<std::pair<at::Tensor, at::Tensor>> deferred_;  // slot, source
};

// AdamW's moments of whole parameters, by parameter name (those that have any).
void put_optimizer_state(SnapshotCopies& copies, const torch::optim::Optimizer& optimizer, const NamedTensors& named,
                         std::vector<ckpt::OptimizerSlot>& optim) {
  const auto& state = optimizer.state();
  size_t i = 0;
  for (const auto& [name, parameter] : named) {
    const auto it = state.find(optimizer_key(parameter));
    if (it == state.end()) continue;
    const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    if (optim.size() <= i) optim.resize(i + 1);
    auto& slot = optim[i++];
    slot.name = name;
    slot.step = adam.step();
    copies.put(slot.exp_avg, adam.exp_avg());
    copies.put(slot.exp_avg_sq, adam.exp_avg_sq());
  }
  optim.resize(i);
}

}  // namespace

void Engine::save_state(ckpt::Checkpoint& c) const {
  auto& im = *impl_;
  im.wait_for_snapshot();  // the previous one may still fill these slots
  c.filled = {};
  SnapshotCopies copies(!comm_.device().is_cpu());
  const auto& named = objective_.trainable();
  const auto& optimizer_state = im.optimizer->state();
  if (options_.zero == 3) {
    // The weights exist only as slices: gathered one unit at a time, rank 0 keeping them.
    std::map<std::string, size_t> index;
    c.model.resize(comm_.rank() == 0 ? named.size() : 0);
    for (size_t i = 0; i < c.model.size(); ++i) {
      c.model[i].first = named[i].first;
      index.emplace(named[i].first, i);
    }
    im.zero->gather_each(im.zero->parameter_shards(), [&](const std::string& name, const at::Tensor& whole) {
      if (comm_.rank() != 0) return;
      copies.put(c.model[index.at(name)].second, whole);
      if (!copies.from_device()) return;
      data::CopyFence copied;  // before the unit's buffer is reused
      copied.record(comm_.device());
      copied.wait();
    });
  }
  if (im.zero) {
    if (options_.zero != 3) copies.put_all(c.model, comm_.rank() == 0 ? named : NamedTensors{});
    c.ema.clear();
    c.optim.clear();
    c.shard.rank = comm_.rank();
    c.shard.ranks = comm_.size();
    c.sharded_ema = im.ema != nullptr;
    const auto& slices = im.zero->parameter_shards();
    c.shard.slices.resize(im.zero->pieces().size());
    size_t k = 0;
    for (const auto& piece : im.zero->pieces()) {
      auto& slice = c.shard.slices[k++];
      slice.name = piece.name;
      slice.offset = piece.param_offset;
      slice.numel = piece.numel;
      const auto it = optimizer_state.find(optimizer_key(slices[piece.bucket]));
      auto cut = [&](const at::Tensor& t) { return t.narrow(0, piece.shard_offset, piece.count); };
      if (it != optimizer_state.end()) {
        const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        slice.step = adam.step();
        copies.put(slice.exp_avg, cut(adam.exp_avg()));
        copies.put(slice.exp_avg_sq, cut(adam.exp_avg_sq()));
      } else {  // no step taken yet: AdamW's initial state
        slice.step = 0;
        copies.put(slice.exp_avg, torch::zeros({piece.count}));
        copies.put(slice.exp_avg_sq, torch::zeros({piece.count}));
      }
      if (im.ema && im.bucket_ema[piece.bucket] >= 0)
        copies.put(slice.ema, cut(im.ema->averages()[im.bucket_ema[piece.bucket]].second));
      else
        slice.ema = at::Tensor();
    }
  } else {
    c.shard = {};
    copies.put_all(c.model, named);
    copies.put_all(c.ema, im.ema ? im.ema->averages() : NamedTensors{});
  }
  put_optimizer_state(copies, *im.optimizer, im.zero ? NamedTensors{} : named, c.optim);
  c.groups.clear();
  for (const auto& group : im.groups)
    c.groups.push_back({group.name, group.checkpoint_prefix, group.ema, group.weights});
  c.state.step = step_;
  c.state.skipped = skipped_;
  c.state.lr = step_ > 0 ? options_.schedule.at(step_ - 1) : options_.schedule.at(0);
  c.state.loss_scale = im.scaler ? im.scaler->scale() : std::numeric_limits<double>::quiet_NaN();
  c.state.loss_scale_good_steps = im.scaler ? im.scaler->good_steps() : 0;
  auto generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    c.rng_cpu = generator.get_state();
  }
  im.snapshot = copies.start(comm_.device());
  c.filled = im.snapshot;
}

void Engine::load_state(const ckpt::Checkpoint& saved, const std::string& path) {
  auto& im = *impl_;
  im.wait_for_snapshot();
  if (im.zero) {
    load_slices(path);
  } else {
    load_whole(saved);
  }
  const auto& state = saved.state;
  if (im.scaler && std::isfinite(state.loss_scale)) im.scaler->restore(state.loss_scale, state.loss_scale_good_steps);
  if (saved.rng_cpu.defined() && saved.rng_cpu.numel() > 0) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved.rng_cpu);
  }
  step_ = state.step;
  skipped_ = state.skipped;
}

void Engine::load_slices(const std::string& path) {
  auto& im = *impl_;
  const ckpt::StateReader reader(path);
  std::vector<std::pair<std::string, int64_t>> numels, averaged;
  for (const auto& [name, parameter] : objective_.trainable()) {
    numels.emplace_back(name, parameter.numel());
    if (im.ema && im.groups[im.group_of.at(name)].ema) averaged.emplace_back(name, parameter.numel());
  }
  reader.check(numels, averaged);
  torch::NoGradGuard no_grad;
  using Kind = ckpt::StateReader::Kind;
  const auto& slices = im.zero->parameter_shards();
  std::vector<at::Tensor> exp_avg, exp_avg_sq;
  std::vector<int64_t> steps(slices.size(), 0);
  for (const auto& slice : slices) {
    exp_avg.push_back(torch::zeros_like(slice));
    exp_avg_sq.push_back(torch::zeros_like(slice));
  }
  for (const auto& piece : im.zero->pieces()) {
    auto into = [&](const at::Tensor& t, Kind kind) {
      t.narrow(0, piece.shard_offset, piece.count)
          .copy_(reader.read(kind, piece.name, piece.param_offset, piece.count));
    };
    if (im.ema && im.bucket_ema[piece.bucket] >= 0)
      into(im.ema->averages()[im.bucket_ema[piece.bucket]].second, Kind::Ema);
    if (!reader.has_optimizer()) continue;
    into(exp_avg[piece.bucket], Kind::ExpAvg);
    into(exp_avg_sq[piece.bucket], Kind::ExpAvgSq);
    steps[piece.bucket] = reader.step(piece.name);
  }
  if (!reader.has_optimizer()) return;  // no step taken yet
  auto& optimizer_state = im.optimizer->state();
  for (size_t b = 0; b < slices.size(); ++b) {
    auto param_state = std::make_unique<torch::optim::AdamWParamState>();
    param_state->step(steps[b]);
    param_state->exp_avg(exp_avg[b]);
    param_state->exp_avg_sq(exp_avg_sq[b]);
    optimizer_state[optimizer_key(slices[b])] = std::move(param_state);
  }
}

void Engine::load_whole(const ckpt::Checkpoint& saved) {
  auto& im = *impl_;
  if (im.ema) ckpt::copy_named(saved.ema, im.ema->averages());
  // AdamW's state, created as its first step would, keyed as it looks it up.
  std::map<std::string, const ckpt::OptimizerSlot*> slots;
  for (const auto& slot : saved.optim) slots.emplace(slot.name, &slot);
  auto& optimizer_state = im.optimizer->state();
  for (const auto& [name, parameter] : objective_.trainable()) {
    const auto it = slots.find(name);
    if (it == slots.end()) continue;  // no step taken yet
    auto param_state = std::make_unique<torch::optim::AdamWParamState>();
    param_state->step(it->second->step);
    param_state->exp_avg(it->second->exp_avg.to(parameter.device()).clone());
    param_state->exp_avg_sq(it->second->exp_avg_sq.to(parameter.device()).clone());
    optimizer_state[optimizer_key(parameter)] = std::move(param_state);
  }
}

}  // namespace wt::train
