// Where a run's samples go at each sample step (fit's part): drawn inline
// on the training ranks (FitRun::draw_sample, with the prompts' videos of
// FitRun::draw_videos), or handed to sample ranks of their own
// (FitRun::hand_off: the weights go to them when they are idle, else the
// sample is dropped with one line).
#pragma once

#include <cstdint>
#include <memory>

#include "wantrain/train/fit.hpp"

namespace wt::train {

class SampleSink {
 public:
  virtual ~SampleSink() = default;
  // Collective: the sample of `step`; `last`: the run's last step (the
  // sample ranks are waited for, at most the checkpoint timeout).
  virtual void sample(int64_t step, bool last) = 0;
};

// The run's sink (nullptr when it draws no samples). `run`, `log` and
// `record` must outlive it.
std::unique_ptr<SampleSink> make_sample_sink(const distributed::World& world, const FitRun& run,
                                             const FitOptions& options, TrainLog& log, RunRecord& record);

}  // namespace wt::train
