#include "wantrain/train/sample_sink.hpp"

#include <chrono>

#include "wantrain/distributed/world.hpp"
#include "wantrain/train/checkpoint_saver.hpp"
#include "wantrain/train/sample_videos.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::train {
namespace {

// Rank 0 draws while the others wait in the agreement that follows its
// checkpoint writes (rank 0's own long work), never under the comm timeout.
// The prompts' videos first, every rank its share, gathered (waiting out
// the ranks' uneven shares as a checkpoint write is waited out).
class InlineSamples final : public SampleSink {
 public:
  InlineSamples(const distributed::World& world, const FitRun& run, const FitOptions& options, TrainLog& log,
                RunRecord& record)
      : world_(world), run_(run), options_(options), log_(log), record_(record) {}

  void sample(int64_t step, bool /*last*/) override {
    std::vector<SampleVideo> videos;
    if (run_.draw_videos)
      videos = gather_sample_videos(world_, run_.draw_videos(step),
                                    options_.checkpoint_timeout + std::max<std::chrono::milliseconds>(
                                                                      world_.timeout(), std::chrono::seconds(60)));
    if (auto sample = run_.draw_sample(step)) {
      sample->videos = std::move(videos);
      log_.sample(step, *sample);
      record_.sample(step, *sample);
    }
    agree_after_writes(world_, options_, {0}, "agreement after drawing a training sample");
  }

 private:
  const distributed::World& world_;
  const FitRun& run_;
  const FitOptions& options_;
  TrainLog& log_;
  RunRecord& record_;
};

// With sample ranks: the weights go to them, or the sample is dropped
// (never a wait, but for the last one's, bounded as a checkpoint write is).
class HandedOffSamples final : public SampleSink {
 public:
  HandedOffSamples(const distributed::World& world, const FitRun& run, const FitOptions& options)
      : world_(world), engine_(*run.engine), hand_off_(*run.hand_off), options_(options) {}

  void sample(int64_t step, bool last) override {
    using Readiness = SampleSender::Readiness;
    SampleSender* sender = hand_off_.sender;
    Readiness readiness = Readiness::Busy;
    if (sender) readiness = last ? sender->wait_ready(step, options_.checkpoint_timeout) : sender->ready(step);
    readiness =
        Readiness(agree_after_writes(world_, options_, {int64_t(readiness)}, "agreement on handing a sample over")[0]);
    if (readiness == Readiness::NotWanted) return;  // the sample ranks wait for the other expert's step
    if (readiness == Readiness::Busy) {
      if (world_.is_root() && last)
        report_warning(
            "step {}: the sample ranks are still busy with an earlier sample after {:g} s ({}): the last "
            "sample is dropped",
            step, std::chrono::duration<double>(options_.checkpoint_timeout).count(),
            setting_reference("checkpoint_timeout"));
      else if (world_.is_root())
        report_warning(
            "step {}: the sample ranks are still busy with an earlier sample: this one is dropped (a sample "
            "takes them longer than {} steps train; {} with a larger N, or more sample ranks)",
            step, options_.sample_every, setting_reference("sample_every"));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    int64_t count = 0;
    for (const auto& group : engine_.groups()) count += group.weights ? int64_t(group.parameters.size()) : 0;
    if (sender) sender->begin(step, count, hand_off_.base);
    engine_.each_sampling_weight([&](const std::string& name, const at::Tensor& whole) {
      if (sender) sender->send(name, whole);
    });
    if (world_.is_root())
      report_info("step {}: the weights of the sample went to the sample ranks in {:.2f} s", step,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

 private:
  const distributed::World& world_;
  Engine& engine_;
  const FitRun::SampleHandOff& hand_off_;
  const FitOptions& options_;
};

}  // namespace

std::unique_ptr<SampleSink> make_sample_sink(const distributed::World& world, const FitRun& run,
                                             const FitOptions& options, TrainLog& log, RunRecord& record) {
  if (run.hand_off) return std::make_unique<HandedOffSamples>(world, run, options);
  if (run.draw_sample) return std::make_unique<InlineSamples>(world, run, options, log, record);
  return nullptr;
}

}  // namespace wt::train
