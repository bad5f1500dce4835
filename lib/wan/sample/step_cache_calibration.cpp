#include "wantrain/wan/sample/step_cache_calibration.hpp"

#include <fmt/format.h>

#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/sample/sampling_pipeline.hpp"

namespace wt::wan {

std::string calibration_home(const SamplingRequest& request) {
  if (!request.weights.empty()) return request.weights;
  if (!request.checkpoint.empty()) return request.checkpoint;
  return request.low_noise;
}

namespace {

void check_uncached(const SamplingRequest& request) {
  if (request.cache.method != CacheMethod::None)
    throw SettingError("calibrate_cache",
                       fmt::format("runs the sampler uncached: give no {}", setting_reference("cache")));
}

}  // namespace

std::vector<SamplingRequest> calibration_requests(const SamplingRequest& request,
                                                  const std::vector<SamplePrompt>& prompts) {
  check_uncached(request);
  if (!request.prompt.empty() || !request.text.empty())
    throw SettingError("calibrate_cache", fmt::format("calibrates on its file's prompts: give no {} or {}",
                                                      setting_reference("prompt"), setting_reference("text")));
  std::vector<SamplingRequest> requests;
  for (const auto& p : prompts) {
    SamplingRequest r = request;
    r.prompt = p.prompt;
    if (p.negative_prompt) r.negative_prompt = p.negative_prompt;
    if (p.seed) r.seed = *p.seed;
    if (p.width > 0) r.size = std::array<int64_t, 2>{p.width, p.height};
    if (p.frames > 0) r.frames = p.frames;
    if (p.steps > 0) r.steps = p.steps;
    if (p.cfg) r.cfg = {*p.cfg};
    if (!p.image.empty()) r.image = p.image;
    requests.push_back(std::move(r));
  }
  return requests;
}

std::vector<SamplingRequest> calibration_requests(const SamplingRequest& request, const std::vector<int64_t>& indices) {
  check_uncached(request);
  if (request.data.empty())
    throw SettingError("calibrate_cache",
                       fmt::format("sample indices calibrate on {}'s samples: give it", setting_reference("data")));
  std::vector<SamplingRequest> requests;
  for (const int64_t index : indices) {
    SamplingRequest r = request;
    r.index = index;
    requests.push_back(std::move(r));
  }
  return requests;
}

CacheCalibrationFile calibrate_step_cache(distributed::World& world, const std::vector<SamplingRequest>& requests,
                                          const c10::Device& device) {
  const auto recorder = StepCaching::calibrating();
  CacheCalibrationFile file;
  bool experts = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    report_info("calibrating on {} of {}: {}", i + 1, requests.size(),
                r.prompt.empty() ? fmt::format("{} sample {}", r.data, r.index) : r.prompt);
    SamplingPipeline pipeline(world, r, device);
    const int steps = *pipeline.request().steps;
    if (i == 0) {
      file.steps = steps;
      file.solver = solver_name(*pipeline.request().solver);
      file.shift = *pipeline.request().shift;
      file.cfg = pipeline.cfg();
      experts = pipeline.two_experts();
    } else if (steps != file.steps) {
      throw SettingError("calibrate_cache", fmt::format("sample {} takes {} steps, the first {}: calibrate one count",
                                                        i + 1, steps, file.steps));
    }
    pipeline.sample(recorder.get());
  }
  file.samples = int(requests.size());
  const auto& first = requests.front();
  if (experts) {
    file.models["high_noise"] = fit_calibration(recorder->record(true));
    file.models["low_noise"] = fit_calibration(recorder->record(false));
    file.loras = first.loras_low;
  } else {
    file.models["model"] = fit_calibration(recorder->record(false));
    file.loras = first.loras;
  }
  return file;
}

}  // namespace wt::wan
