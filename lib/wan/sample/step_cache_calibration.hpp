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

// The requests a calibration samples: `request` with each prompt (its
// line's --seed, --size, --frames, --steps, --cfg, --negative-prompt and
// --image where given), or with each sample `index` of its data.
// SettingError naming `calibrate_cache` for a request with a step cache, or
// conditioned otherwise than the calibration asks.
std::vector<SamplingRequest> calibration_requests(const SamplingRequest& request,
                                                  const std::vector<SamplePrompt>& prompts);
std::vector<SamplingRequest> calibration_requests(const SamplingRequest& request, const std::vector<int64_t>& indices);

// Samples each request on every rank of `world`, nothing skipped, and fits
// each model: "model", or A14B's "high_noise" and "low_noise".
CacheCalibrationFile calibrate_step_cache(distributed::World& world, const std::vector<SamplingRequest>& requests,
                                          const c10::Device& device);

}  // namespace wt::wan
