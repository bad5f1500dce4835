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

CacheCalibrationFile calibrate_step_cache(distributed::World& world, const SamplingRequest& request,
                                          const std::vector<SamplePrompt>& prompts, const c10::Device& device) {
  if (!request.prompt.empty() || !request.data.empty() || !request.text.empty())
    throw SettingError("calibrate_cache",
                       fmt::format("calibrates on its file's prompts: give no {}, {} or {}", setting_reference("prompt"),
                                   setting_reference("data"), setting_reference("text")));
  if (request.cache.method != CacheMethod::None)
    throw SettingError("calibrate_cache",
                       fmt::format("runs the sampler uncached: give no {}", setting_reference("cache")));
  const auto recorder = StepCaching::calibrating();
  CacheCalibrationFile file;
  bool experts = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    SamplingRequest r = request;
    r.prompt = p.prompt;
    if (p.negative_prompt) r.negative_prompt = p.negative_prompt;
    if (p.seed) r.seed = *p.seed;
    if (p.width > 0) r.size = std::array<int64_t, 2>{p.width, p.height};
    if (p.frames > 0) r.frames = p.frames;
    if (p.steps > 0) r.steps = p.steps;
    if (p.cfg) r.cfg = {*p.cfg};
    if (!p.image.empty()) r.image = p.image;
    report_info("calibrating on prompt {} of {} (line {}): {}", i + 1, prompts.size(), p.line, p.prompt);
    SamplingPipeline pipeline(world, r, device);
    if (i == 0) {
      file.steps = *pipeline.request().steps;
      file.solver = solver_name(*pipeline.request().solver);
      file.shift = *pipeline.request().shift;
      file.cfg = pipeline.cfg();
      experts = pipeline.two_experts();
    } else if (*pipeline.request().steps != file.steps) {
      throw SettingError("calibrate_cache", fmt::format("line {} samples {} steps, line {} {}: calibrate one count",
                                                        p.line, *pipeline.request().steps, prompts[0].line,
                                                        file.steps));
    }
    pipeline.sample(recorder.get());
  }
  file.prompts = int(prompts.size());
  if (experts) {
    file.models["high_noise"] = fit_calibration(recorder->record(true));
    file.models["low_noise"] = fit_calibration(recorder->record(false));
    file.loras = request.loras_low;
  } else {
    file.models["model"] = fit_calibration(recorder->record(false));
    file.loras = request.loras;
  }
  return file;
}

}  // namespace wt::wan
