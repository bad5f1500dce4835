#include "wantrain/distributed/reducer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>

#include "wantrain/util/error.hpp"

namespace wt::distributed {

struct Reducer::State {
  struct Param {
    std::string name;
    at::Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;     // elements into its bucket
    bool ready = false;     // its gradient arrived in this synchronising backward
    bool got_grad = false;  // a gradient arrived in any micro-step of this step
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t hook = 0;
  };
  struct Bucket {
    std::vector<size_t> params;
    int64_t numel = 0;                  // padding included
    at::ScalarType dtype = at::kFloat;  // its parameters'
    // [numel] flat; the params' grads are views into it. Transient mode: in
    // the wire dtype, from the first gradient until the reduction is done.
    at::Tensor buffer;
    // shard mode: [numel / world size], this rank's reduced slice; transient
    // mode: the slices summed over the step's micro-steps.
    at::Tensor shard;
    at::Tensor received;  // transient mode: [numel / world size] the reduction in flight
    // With a 16-bit comm dtype: what travels, [numel] and in shard mode its
    // reduced slice [numel / world size].
    at::Tensor wire, wire_shard;
    size_t pending = 0;
    WorkPtr work;
  };

  Comm& comm;
  ReducerOptions options;
  std::vector<Param> params;  // those reduced, registration order
  std::vector<Bucket> buckets;
  std::deque<size_t> in_flight;  // transient mode: buckets reducing, oldest first
  std::vector<at::Tensor> buffers;
  std::mutex mutex;
  bool sync = false;
  size_t next_bucket = 0;  // the next bucket to start, in index order
  int64_t issued = 0;
  double exposed_seconds = 0;
  std::vector<std::string> unused;  // names without a gradient on the last synchronising micro-step

  State(Comm& c, ReducerOptions o) : comm(c), options(o) {}

  bool transient() const { return options.transient_buckets; }
  // What a transient bucket's buffer travels in.
  at::ScalarType wire_dtype(const Bucket& b) const { return compressed(b) ? options.comm_dtype : b.dtype; }
  void open(Bucket& b) {
    if (!b.buffer.defined()) b.buffer = torch::zeros({b.numel}, b.shard.options().dtype(wire_dtype(b)));
  }
  // Transient mode: the oldest reduction in flight waited for, added to its
  // slice, and its buffers freed.
  void retire_oldest() {
    Bucket& b = buckets[in_flight.front()];
    in_flight.pop_front();
    b.work->wait();
    b.shard.add_(b.received, options.average ? 1.0 / comm.size() : 1.0);
    b.buffer = at::Tensor();
    b.received = at::Tensor();
    b.work.reset();
  }

  // `during_backward`: the rest of backward still runs on this rank's cores.
  void launch_ready_buckets(bool during_backward) {
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0)
      launch(buckets[next_bucket++], during_backward);
  }
  // A bucket narrower than fp32 already travels as it is.
  bool compressed(const Bucket& b) const { return options.comm_dtype != at::kFloat && b.dtype == at::kFloat; }
  void launch(Bucket& b, bool during_backward) {
    if (transient()) {
      open(b);  // a bucket none of whose parameters got a gradient reduces zeros
      b.received = at::empty({b.numel / comm.size()}, b.buffer.options());
      b.work = comm.reduce_scatter_async(b.received, b.buffer, {ReduceOp::Sum, during_backward});
      ++issued;
      in_flight.push_back(size_t(&b - buckets.data()));
      while (int(in_flight.size()) > std::max(1, options.buckets_in_flight)) retire_oldest();
      return;
    }
    ReduceOp op = options.average ? ReduceOp::Avg : ReduceOp::Sum;
    at::Tensor in = b.buffer, out = b.shard;
    if (compressed(b)) {
      if (!b.wire.defined()) {
        b.wire = at::empty_like(b.buffer, b.buffer.options().dtype(options.comm_dtype));
        if (options.shard) b.wire_shard = at::empty_like(b.shard, b.shard.options().dtype(options.comm_dtype));
      }
      b.wire.copy_(b.buffer);
      in = b.wire;
      out = b.wire_shard;
      op = ReduceOp::Sum;  // averaged after widening, in the buckets' precision
    }
    b.work = options.shard ? comm.reduce_scatter_async(out, in, {op, during_backward})
                           : comm.all_reduce_async(in, {op, during_backward});
    ++issued;
  }
  // After the bucket's work completed: the 16-bit sum widened back.
  void widen(Bucket& b) {
    if (!compressed(b)) return;
    at::Tensor& into = options.shard ? b.shard : b.buffer;
    into.copy_(options.shard ? b.wire_shard : b.wire);
    if (options.average) into.div_(comm.size());
  }
  void on_gradient(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    Param& p = params[index];
    p.got_grad = true;
    if (transient()) {
      // Into the bucket (narrowed to the wire dtype), and the whole gradient
      // dropped. AccumulateGrad runs once per backward, so a second arrival
      // would be a gradient the bucket already reduced.
      if (p.ready) throw Error(fmt::format("Reducer: a second gradient for '{}' in one backward", p.name));
      Bucket& b = buckets[p.bucket];
      open(b);
      b.buffer.narrow(0, p.offset, p.tensor.numel()).copy_(p.tensor.grad().reshape({-1}));
      p.tensor.mutable_grad() = at::Tensor();
    }
    if (!sync || p.ready) return;
    p.ready = true;
    if (--buckets[p.bucket].pending == 0) {
      if (options.on_bucket_ready) options.on_bucket_ready(p.bucket);
      launch_ready_buckets(/*during_backward=*/true);
    }
  }
};

namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<Reducer::State> state, size_t index) : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto state = state_.lock()) state->on_gradient(index_);
    return outputs;
  }

 private:
  std::weak_ptr<Reducer::State> state_;
  size_t index_;
};

// FNV-1a of "name[shape]dtype": equal on every rank that has the same parameter.
int64_t fingerprint(const std::string& name, const at::Tensor& t) {
  const std::string text = fmt::format("{}[{}]{}", name, fmt::join(t.sizes(), ","), c10::toString(t.scalar_type()));
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

void check_same_parameters(Comm& comm, const Reducer::NamedTensors& parameters) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(comm.device());
  auto count = torch::full({2}, int64_t(parameters.size()), i64);  // [max, -min]
  count[1] = -count[1];
  comm.all_reduce(count, {ReduceOp::Max});
  const int64_t most = count[0].item<int64_t>(), fewest = -count[1].item<int64_t>();
  if (most != fewest)
    throw UsageError(fmt::format("Reducer: the ranks' models differ: between {} and {} parameters (this rank has {})",
                                 fewest, most, parameters.size()));
  if (parameters.empty()) return;
  std::vector<int64_t> prints;
  for (const auto& [name, tensor] : parameters) prints.push_back(fingerprint(name, tensor));
  auto highest = torch::tensor(prints, torch::kInt64).to(comm.device());
  auto lowest = -highest.clone();
  comm.all_reduce(highest, {ReduceOp::Max});
  comm.all_reduce(lowest, {ReduceOp::Max});
  const auto differ = (highest != -lowest).nonzero().cpu();
  if (differ.numel() > 0) {
    const auto& [name, t] = parameters[static_cast<size_t>(differ[0][0].item<int64_t>())];
    throw UsageError(fmt::format("Reducer: the ranks' models differ at parameter {} (this rank has '{}' [{}] {})",
                                 differ[0][0].item<int64_t>(), name, fmt::join(t.sizes(), ","),
                                 c10::toString(t.scalar_type())));
  }
}

}  // namespace

Reducer::Reducer(Comm& comm, NamedTensors parameters, std::vector<at::Tensor> buffers, ReducerOptions options)
    : state_(std::make_shared<State>(comm, options)) {
  if (options.comm_dtype != at::kFloat && options.comm_dtype != at::kBFloat16 && options.comm_dtype != at::kHalf)
    throw SettingError("grad_comm_dtype",
                       fmt::format("is {}; gradients travel as fp32, bf16 or fp16", c10::toString(options.comm_dtype)));
  State& s = *state_;
  check_same_parameters(comm, parameters);
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, t] : parameters) comm.broadcast(t.detach());
    for (const auto& t : buffers) comm.broadcast(t);
  }
  s.buffers = std::move(buffers);
  for (auto& [name, t] : parameters)
    if (t.requires_grad()) {
      s.params.emplace_back();
      s.params.back().name = name;
      s.params.back().tensor = t;
    }

  // Buckets over the parameters in reverse order; a new bucket when the last
  // one has reached its cap (or, by unit, when the unit changes), the group
  // or the dtype changes.
  auto cap_of = [&](size_t bucket) { return bucket == 0 ? options.first_bucket_bytes : options.bucket_bytes; };
  auto unit_of = [&](size_t k) { return options.unit_of ? options.unit_of(s.params[k].name) : std::string(); };
  std::vector<size_t> order;  // reverse registration order
  for (size_t k = s.params.size(); k-- > 0;) order.push_back(k);
  if (options.unit_of) {
    // Units in the reverse order of their first parameter's registration
    // (the order backward reaches them; a unit registered in two places, a
    // VACE block beside its base block, is one run), the root ("") last.
    std::vector<std::string> units(s.params.size());
    std::map<std::string, size_t> first;
    for (size_t k = 0; k < s.params.size(); ++k) first.emplace(units[k] = unit_of(k), k);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const std::string &ua = units[a], &ub = units[b];
      if (ua.empty() || ub.empty()) return !ua.empty() && ub.empty();
      return first.at(ua) > first.at(ub);
    });
  }
  int64_t bucket_bytes = 0;  // of the last bucket
  for (const size_t k : order) {
    const at::Tensor& t = s.params[k].tensor;
    const size_t last = s.buckets.empty() ? 0 : s.buckets.back().params.front();
    const bool full = options.unit_of ? unit_of(last) != unit_of(k) : bucket_bytes >= cap_of(s.buckets.size() - 1);
    const bool other_group =
        options.group_of && options.group_of(s.params[last].name) != options.group_of(s.params[k].name);
    const bool new_bucket =
        s.buckets.empty() || full || other_group || s.params[last].tensor.scalar_type() != t.scalar_type();
    if (new_bucket) {
      s.buckets.emplace_back();
      bucket_bytes = 0;
    }
    s.buckets.back().params.push_back(k);
    s.params[k].bucket = s.buckets.size() - 1;
    bucket_bytes += t.numel() * t.element_size();
  }
  // Shard mode: every rank's slice a whole number of 16 elements (64-byte
  // aligned in fp32, as vectorised kernels like).
  const int64_t granule = options.shard ? 16 * int64_t(comm.size()) : 1;
  if (options.transient_buckets && !options.shard)
    throw Error("Reducer: transient_buckets reduce-scatter: they need shard");
  for (auto& b : s.buckets) {
    int64_t numel = 0;
    for (size_t k : b.params) numel += s.params[k].tensor.numel();
    b.numel = (numel + granule - 1) / granule * granule;
    const at::Tensor& first = s.params[b.params.front()].tensor;
    b.dtype = first.scalar_type();
    const auto options_of_bucket = first.options().requires_grad(false);
    if (options.shard) b.shard = torch::zeros({b.numel / comm.size()}, options_of_bucket);
    if (!options.transient_buckets) b.buffer = torch::zeros({b.numel}, options_of_bucket);  // [numel]
    int64_t offset = 0;
    for (size_t k : b.params) {
      auto& p = s.params[k];
      p.offset = offset;
      if (!options.transient_buckets)
        p.tensor.mutable_grad() = b.buffer.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes());
      offset += p.tensor.numel();
    }
  }
  refresh_accumulators();
}

Reducer::~Reducer() {
  for (auto& p : state_->params)
    if (p.accumulator) p.accumulator->del_post_hook(p.hook);
}

void Reducer::refresh_accumulators() {
  State& s = *state_;
  for (size_t k = 0; k < s.params.size(); ++k) {
    auto& p = s.params[k];
    if (p.accumulator) p.accumulator->del_post_hook(p.hook);
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    p.hook = p.accumulator->add_post_hook(std::make_unique<ReadyHook>(state_, k));
  }
}

void Reducer::zero_grad() {
  if (state_->transient()) {
    for (auto& b : state_->buckets) b.shard.zero_();
    for (auto& p : state_->params) {
      p.got_grad = false;
      p.tensor.mutable_grad() = at::Tensor();  // a gradient left from outside a step
    }
    return;
  }
  for (auto& b : state_->buckets) b.buffer.zero_();
  for (auto& p : state_->params) {
    p.got_grad = false;
    // An optimizer or user that replaced or dropped the gradient would break the views.
    if (!p.tensor.grad().defined() || !p.tensor.grad().is_alias_of(state_->buckets[p.bucket].buffer))
      throw Error(
          fmt::format("Reducer: the gradient of '{}' is no longer a view of its bucket "
                      "(was it set to None by zero_grad(set_to_none)?)",
                      p.name));
  }
}

void Reducer::prepare_for_backward(bool sync) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!sync && s.transient())
    throw Error("Reducer: with transient_buckets every backward reduces (prepare_for_backward(sync = true))");
  s.sync = sync;
  if (!sync) return;
  s.next_bucket = 0;
  for (auto& b : s.buckets) {
    b.pending = b.params.size();
    b.work.reset();
  }
  for (auto& p : s.params) p.ready = false;
}

void Reducer::finalize_backward() {
  State& s = *state_;
  if (!s.sync) return;
  finalize_backward_unchecked();
  if (s.options.allow_unused) return;
  auto any =
      torch::full({1}, int32_t(s.unused.size()), torch::TensorOptions().dtype(torch::kInt32).device(s.comm.device()));
  s.comm.all_reduce(any, {ReduceOp::Max});
  check_unused(any.item<int32_t>());
}

void Reducer::finalize_backward_unchecked() {
  State& s = *state_;
  if (!s.sync) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.unused.clear();
    for (auto& p : s.params)
      if (!p.got_grad) s.unused.push_back(p.name);
    // Buckets whose gradients did not all arrive (unused parameters) start now, still in order.
    for (auto& b : s.buckets) b.pending = 0;
    s.launch_ready_buckets(/*during_backward=*/false);
    s.sync = false;
  }
  const auto start = std::chrono::steady_clock::now();
  if (s.transient()) {
    while (!s.in_flight.empty()) s.retire_oldest();
  } else {
    for (auto& b : s.buckets) {
      b.work->wait();
      s.widen(b);
    }
  }
  s.exposed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t Reducer::unused_parameters() const { return int64_t(state_->unused.size()); }

void Reducer::check_unused(int64_t over_ranks) const {
  const State& s = *state_;
  if (s.options.allow_unused || over_ranks == 0) return;
  if (s.unused.empty())
    throw UsageError(fmt::format(
        "Reducer: a parameter got no gradient on another rank (that rank names it; {} reduces zeros for it)",
        setting_reference("allow_unused")));
  throw UsageError(fmt::format(
      "Reducer: {} parameter{} got no gradient in this step: {} (use {} to reduce zeros for them)", s.unused.size(),
      s.unused.size() == 1 ? "" : "s", fmt::join(s.unused, ", "), setting_reference("allow_unused")));
}

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> names;
  for (const auto& b : state_->buckets) {
    names.emplace_back();
    for (size_t k : b.params) names.back().push_back(state_->params[k].name);
  }
  return names;
}

std::vector<at::Tensor> Reducer::bucket_buffers() const {
  std::vector<at::Tensor> buffers;
  for (const auto& b : state_->buckets) buffers.push_back(b.buffer);
  return buffers;
}

std::vector<BucketLayout> Reducer::bucket_layouts() const {
  std::vector<BucketLayout> layouts;
  for (const auto& b : state_->buckets) {
    BucketLayout layout;
    layout.numel = b.numel;
    int64_t offset = 0;
    for (size_t k : b.params) {
      const auto& p = state_->params[k];
      layout.entries.push_back({p.name, offset, p.tensor.numel()});
      offset += p.tensor.numel();
    }
    layouts.push_back(std::move(layout));
  }
  return layouts;
}

std::vector<at::Tensor> Reducer::gradient_shards() const {
  std::vector<at::Tensor> shards;
  for (const auto& b : state_->buckets) shards.push_back(b.shard);
  return shards;
}

int64_t Reducer::gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : state_->buckets)
    for (const at::Tensor* t : {&b.buffer, &b.shard, &b.received, &b.wire, &b.wire_shard})
      if (t->defined()) bytes += t->nbytes();
  return bytes;
}

int64_t Reducer::collectives_issued() const { return state_->issued; }
double Reducer::last_exposed_comm_seconds() const { return state_->exposed_seconds; }

}  // namespace wt::distributed
