#include "op_profile.hpp"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace wt {

namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

namespace {

// "torch::autograd::CppNode<wt::nn::(anonymous namespace)::FusedGelu>"
// (a custom autograd Function's backward) as "FusedGelu backward".
std::string readable(const std::string& name) {
  const std::string node = "torch::autograd::CppNode<";
  if (name.rfind(node, 0) != 0) return name;
  std::string inner = name.substr(node.size(), name.size() - node.size() - 1);
  const auto last = inner.rfind("::");
  return (last == std::string::npos ? inner : inner.substr(last + 2)) + " backward";
}

}  // namespace

OpProfile::OpProfile() {
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true,
                                    /*profile_memory=*/false, /*with_stack=*/false, /*with_flops=*/true);
  // Kineto is set up first (torch.profiler does the same); enabling alone crashes in LibTorch 2.x.
  profiler::prepareProfiler(config, {impl::ActivityType::CPU});
  profiler::enableProfiler(config, {impl::ActivityType::CPU});
  running_ = true;
}

OpProfile::~OpProfile() {
  if (running_) profiler::disableProfiler();
}

std::vector<OpTime> OpProfile::stop() {
  running_ = false;
  const auto result = profiler::disableProfiler();
  struct Span {
    uint64_t start, end;
    std::string name;
    uint64_t flops;
  };
  // Per thread, spans in start order, enclosing ones first; a span's self
  // time is its duration less that of the spans directly inside it.
  std::map<uint64_t, std::vector<Span>> threads;
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CPU) continue;
    threads[event.startThreadId()].push_back(
        {event.startNs() / 1000, (event.startNs() + event.durationNs()) / 1000, event.name(), event.flops()});
  }
  std::map<std::string, OpTime> by_name;
  for (auto& [thread, spans] : threads) {
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return std::tie(a.start, b.end) < std::tie(b.start, a.end); });
    std::vector<std::pair<const Span*, OpTime*>> open;
    for (const auto& span : spans) {
      while (!open.empty() && open.back().first->end <= span.start) open.pop_back();
      auto& op = by_name[span.name];
      if (op.calls == 0) op.name = readable(span.name);
      const double ms = double(span.end - span.start) / 1000.0;
      ++op.calls;
      op.gflop += double(span.flops) * 1e-9;
      op.total_ms += ms;
      op.self_ms += ms;
      if (!open.empty()) open.back().second->self_ms -= ms;
      open.push_back({&span, &op});
    }
  }
  std::vector<OpTime> ops;
  for (auto& [name, op] : by_name) ops.push_back(std::move(op));
  std::sort(ops.begin(), ops.end(), [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  return ops;
}

std::string format_op_times(const std::vector<OpTime>& ops, size_t top, int64_t steps) {
  double all = 0;
  for (const auto& op : ops) all += op.self_ms;
  std::string out = fmt::format("  {:<56}  {:>9}  {:>13}  {:>6}  {:>14}  {:>8}\n", "operator", "calls/step",
                                "self ms/step", "share", "total ms/step", "GFLOP/s");
  for (size_t i = 0; i < std::min(top, ops.size()); ++i) {
    const auto& op = ops[i];
    out += fmt::format("  {:<56}  {:>9}  {:>13.2f}  {:>5.1f}%  {:>14.2f}  {:>8}\n", op.name.substr(0, 56),
                       op.calls / std::max<int64_t>(steps, 1), op.self_ms / double(steps), 100 * op.self_ms / all,
                       op.total_ms / double(steps),
                       op.gflop > 0 ? fmt::format("{:.1f}", op.gflop / (op.self_ms * 1e-3)) : std::string());
  }
  out += fmt::format("  all operators: {:.2f} ms/step of self time\n", all / double(steps));
  return out;
}

}  // namespace wt
