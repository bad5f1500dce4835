#include "wantrain/wan/run/sample_group.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <optional>

#include "wantrain/distributed/mpi_check.hpp"
#include "wantrain/distributed/poll_request.hpp"
#include "wantrain/train/train_log.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/test_hooks.hpp"

namespace wt::wan {
namespace {

// What rank 0 tells the other sample ranks, one command at a time.
enum Op : int64_t { kTensor = 0, kDraw = 1, kStop = 2 };
using Command = std::array<int64_t, 3>;  // {op, a, b}: tensor {source, parameter}; draw {step}; stop {status}

// Between samples the sample ranks wait for hours: rank 0 in its receiver,
// the others here, both sleeping between polls (a core on a node of
// training ranks is theirs).
Command broadcast_command(const distributed::World& group, Command command) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibcast(command.data(), 3, MPI_INT64_T, 0, group.comm(), &request));
  distributed::poll_request(request);  // unbounded: rank 0's death ends the job
  return command;
}

// A source's parameters by name, and in the order of named_parameters().
struct Parameters {
  std::vector<at::Tensor> list;
  std::map<std::string, size_t> index;
  explicit Parameters(WanModelImpl& model) {
    for (const auto& item : model.named_parameters()) {
      index.emplace(item.key(), list.size());
      list.push_back(item.value());
    }
  }
};

}  // namespace

int run_sample_group(const distributed::World& group, train::SampleReceiver* receiver,
                     std::vector<SampleSource>& sources, const TrainingSampler& sampler, const PromptVideos* videos,
                     const SampleGroupOptions& options, distributed::Comm& comm) {
  const bool root = group.is_root();
  std::vector<Parameters> parameters;
  for (auto& source : sources) parameters.emplace_back(*source.model);
  std::optional<train::TrainLog> log;
  if (root) {
    train::TrainLogOptions log_options;
    log_options.metrics_path = options.metrics_path;
    log_options.tensorboard_dir = options.tensorboard_dir;
    log_options.append = options.first_step > 0;
    log_options.first_step = options.first_step;
    log_options.stream = nullptr;  // the training ranks' bar is the run's
    log.emplace(true, log_options);
  }
  // Two experts: the low-noise one is the model, the high-noise one takes its steps.
  WanModelImpl* model = sources.front().model.get();
  std::optional<HighNoiseModel> high;
  for (auto& source : sources) {
    if (source.name == "low") model = source.model.get();
    if (source.name == "high") high = HighNoiseModel{source.model.get(), options.boundary};
  }

  auto draw = [&](int64_t step) {
    torch::NoGradGuard no_grad;
    test_delay("sample_draw");
    auto report = sampler.draw(*model, {}, {}, step, high ? &*high : nullptr);
    std::vector<train::SampleVideo> drawn;
    if (videos) drawn = videos->draw(*model, step, high ? &*high : nullptr);
    if (!root) return;
    report.videos = std::move(drawn);
    log->sample(step, report);
  };
  // Rank 0's receipt of one tensor, handed to the others: the same parameter on every rank.
  auto take = [&](size_t source, size_t parameter, const at::Tensor& arrived) {
    auto target = parameters[source].list[parameter];
    torch::NoGradGuard no_grad;
    if (root) target.copy_(arrived);
    if (comm.size() > 1) comm.broadcast(target.data());
  };

  if (!root) {  // the others follow rank 0's commands
    for (;;) {
      const auto command = broadcast_command(group, {});
      if (command[0] == kStop) return int(command[1]);
      if (command[0] == kDraw) draw(command[1]);
      if (command[0] == kTensor) take(size_t(command[1]), size_t(command[2]), {});
    }
  }

  const size_t n = sources.size();
  std::vector<int64_t> have(n, -1);  // the step of the weights each model holds
  std::vector<bool> asked(n, false), done(n, false), acknowledged(n, false);
  int64_t drawn = -1;
  int status = 0;
  auto ask = [&](size_t s, int64_t from_step) {
    if (done[s] || asked[s]) return;
    receiver->ask(s, from_step);
    asked[s] = true;
  };
  for (size_t s = 0; s < n; ++s) ask(s, 0);
  for (;;) {
    const auto arrival = receiver->next();
    const size_t s = arrival.source;
    if (arrival.done) {
      done[s] = true;
      status = std::max(status, arrival.status);
    } else {
      asked[s] = false;
      // The weights sent complete a frozen base: the one these ranks built.
      if (arrival.base != sources[s].base)
        throw Error(fmt::format(
            "the {} group trains on a frozen base of checksum {}, but the sample ranks built theirs as {}: both "
            "read it from the same file (the starting weights or the teacher); was it rewritten meanwhile?",
            sources[s].name.empty() ? "training" : sources[s].name, arrival.base.empty() ? "(none)" : arrival.base,
            sources[s].base.empty() ? "(none)" : sources[s].base));
      receiver->receive(
          arrival,
          [&](const std::string& name, at::ScalarType dtype, const std::vector<int64_t>& shape) {
            if (!parameters[s].index.count(name))
              throw Error(fmt::format("the sample ranks' model has no parameter {} (sent by the {} group)", name,
                                      sources[s].name.empty() ? "training" : sources[s].name));
            return torch::empty(shape, torch::dtype(dtype));
          },
          [&](const std::string& name, const at::Tensor& tensor) {
            const size_t parameter = parameters[s].index.at(name);
            broadcast_command(group, {kTensor, int64_t(s), int64_t(parameter)});
            take(s, parameter, tensor);
          });
      have[s] = arrival.step;
    }
    // A sample once every model holds one step's weights (with two experts,
    // the group that sent an earlier step is asked for the later one).
    const int64_t target = *std::max_element(have.begin(), have.end());
    const bool matched = std::all_of(have.begin(), have.end(), [&](int64_t h) { return h == target; });
    if (matched && target > drawn) {
      broadcast_command(group, {kDraw, target, 0});
      draw(target);
      drawn = target;
    }
    for (size_t k = 0; k < n; ++k)
      if (matched || have[k] < target) ask(k, matched ? drawn + 1 : target);
    // A group that is done may go: its last weights are in (the last sample
    // was drawn above when they completed a pair).
    for (size_t k = 0; k < n; ++k)
      if (done[k] && !acknowledged[k]) {
        receiver->finished(k, status);
        acknowledged[k] = true;
      }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  broadcast_command(group, {kStop, status, 0});
  return status;
}

}  // namespace wt::wan
