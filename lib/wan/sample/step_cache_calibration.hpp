// wansample --calibrate-cache: the uncached sampler on a few prompts, as
// the request would sample them, each model's block stack recorded
// (step_cache.hpp's CacheRecord) and fitted (cache_calibration.hpp) into
// the file a cached sample of this model reads.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/sample/cache_calibration.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"
#include "wantrain/wan/sample/sampling_request.hpp"

namespace wt::wan {

// What a request's calibration sits beside: its weights, else its
// checkpoint, else its low-noise expert's weights.
std::string calibration_home(const SamplingRequest& request);

// Samples each prompt (its line's --seed, --size, --frames, --steps, --cfg
// and --negative-prompt where given; the rest the request's) on every rank
// of `world`, nothing skipped, and fits each model: "model", or A14B's
// "high_noise" and "low_noise". SettingError naming `calibrate_cache` for a
// request conditioned otherwise than on prompts, or one with a step cache.
CacheCalibrationFile calibrate_step_cache(distributed::World& world, const SamplingRequest& request,
                                          const std::vector<SamplePrompt>& prompts, const c10::Device& device);

}  // namespace wt::wan
