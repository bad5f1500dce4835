// What a wantrain job's ranks hold, for its banner (the memory plan of
// wan/plan/memory_plan.hpp, applied to the job's settings): each training
// rank's plan at the data's shapes, the limits it exceeds, the block-swap
// advice for a LoRA run that does not fit, and what each sample rank holds.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/run/train_settings.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"

namespace wt::wan {

// The memory plan's settings for this run of `model` on `device`, at latents
// (F, H, W) and `sample_bytes` per sample as the loader hands it over, on
// `world_size` ranks (what ZeRO splits the optimizer state over).
MemoryPlanSettings memory_plan_settings(const TrainSettings& settings, const WanConfig& model,
                                        const std::optional<WanConfig>& teacher, std::array<int64_t, 3> latents,
                                        double sample_bytes, const at::Device& device, int world_size);

// The prompt file's encoders (the VAE's weights and its decode of the
// largest prompt's frame, a line's size else the training sample's, and
// umT5's weights), from their files' headers.
struct PromptVideoMemory {
  double video_bytes = 0, t5_bytes = 0;
};
PromptVideoMemory prompt_video_memory(const TrainSettings& settings, const std::vector<SamplePrompt>& prompts,
                                      const data::Dataset* data);

struct MemorySummary {
  std::string table;
  std::vector<std::string> warnings;  // one per limit the plan exceeds
};

// Collective. This rank's memory plan at the data's latents (or the
// settings' plan latents), and the limits it exceeds. Data of several
// shapes (buckets) are planned at each; the largest plan is the one shown
// and held against the limits, after a row per bucket.
MemorySummary memory_summary(distributed::World& world, const distributed::Comm& comm, const TrainSettings& settings,
                             const std::optional<WanConfig>& model_config,
                             const std::optional<WanConfig>& teacher_config, const data::Dataset* data,
                             const PromptVideoMemory& prompts);

// What each sample rank holds (setting sample_ranks), for the banner: the
// model's weights (`models` experts), held as sample_ranks.cpp holds them, a
// forward of the training sample's size with its tokens split over the
// sample ranks, and with prompt videos the VAE and its decode.
std::string sample_rank_memory(const TrainSettings& settings, const std::optional<WanConfig>& model,
                               const data::Dataset* data, int models, const PromptVideoMemory& prompts);

}  // namespace wt::wan
