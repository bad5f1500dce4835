// The sample ranks of a run (wantrain --sample-ranks K): K ranks that never
// train. They wait, idle, for the weights of a sample (train/sample_handoff.hpp),
// then draw it — the training sample's PNG and the prompt file's videos, as
// a run without sample ranks draws them inline — and ask for the next.
// Every video is drawn by the K ranks together, its tokens split over them
// (Ulysses, as --sp splits them in training); their rank 0 receives the
// weights, hands each tensor on to the others, writes the files and keeps
// the sample log.
//
// With Wan2.2 A14B's two experts (--experts) a sample needs both: each
// expert group sends its own, and a sample is drawn once both came from one
// step, the high-noise expert taking the steps at or above the boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/train/sample_handoff.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/run/training_sample.hpp"
#include "wantrain/wan/sample/prompt_videos.hpp"

namespace wt::wan {

// One source's model on the sample ranks, built as the training ranks build
// theirs (the same frozen base and adapters; what is trained comes in
// every sample), on their device, in eval mode.
struct SampleSource {
  std::string name;  // "" one model; "high" or "low" for an expert
  WanModel model{nullptr};
  std::string base;  // a LoRA model's frozen base: its checksum (held_weights_checksum); "" none
};

struct SampleGroupOptions {
  double boundary = 0.875;      // two experts: the high-noise expert's steps, t >= boundary * 1000
  std::string metrics_path;     // <output-dir>/samples/metrics.jsonl (rank 0)
  std::string tensorboard_dir;  // <output-dir>/tb/samples; empty: no event files
  int64_t first_step = 0;       // a resumed run's step: the files continue from it
};

// Runs on every sample rank until every source said it is done; returns
// the exit status of the training (the highest of the sources'). `receiver`
// on rank 0 of `group` only; `sources` in the receiver's order; `comm`
// splits the sequence (its models are set to it by the caller when K > 1).
int run_sample_group(const distributed::World& group, train::SampleReceiver* receiver,
                     std::vector<SampleSource>& sources, const TrainingSampler& sampler, const PromptVideos* videos,
                     const SampleGroupOptions& options, distributed::Comm& comm);

}  // namespace wt::wan
