// One sample from a request (sample/sampling_request.hpp), as wansample
// makes it: the request checked and resolved, then the condition encoded,
// the model(s) loaded, the solver run with guidance (and the experts), and
// on rank 0 the latents written, decoded by the VAE and written as a video.
//
// Every rank of `world` runs the same pipeline on the same inputs (the
// noise is the seed's, drawn on the CPU): with several ranks the model
// splits the tokens (sp), the branches of guidance (cfg_parallel) or the
// weights (shard_weights) over them, and rank 0 alone writes. What it
// chooses and writes goes to the Reporter (util/reporter.hpp), one line
// each; mistakes are SettingErrors naming the request's settings, found on
// every rank alike (one line for the job) and before anything large is read.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"
#include "wantrain/wan/plan/sampling_plan.hpp"
#include "wantrain/wan/sample/sampling_request.hpp"
#include "wantrain/wan/sample/step_cache.hpp"
#include "wantrain/wan/vae/vae_config.hpp"

namespace wt::wan {

class SamplingPipeline {
 public:
  // Checks and resolves `request`: the model config, each weights file's
  // header against it, the release's settings where the request leaves
  // them, the VAE, the unconditional branch and the sample's shape (a
  // dataset sample or a text row is read here; a prompt is encoded by
  // sample()). Reports the settings and the memory the sample will take.
  SamplingPipeline(distributed::World& world, SamplingRequest request, const c10::Device& device);
  ~SamplingPipeline();

  // What each rank will hold, phase by phase, from the files' headers
  // (wansample --dry-run); reads no weights.
  SamplingPlan plan() const;

  // Encodes the condition, loads the model(s), samples and frees them:
  // the latents [C, F, H, W], fp32 on the CPU, on every rank. With the
  // request's step cache, reported; `caching`, when given, instead of it
  // (a calibration's recorder: step_cache_calibration.hpp).
  at::Tensor sample(StepCaching* caching = nullptr);

  // Rank 0: the latents as a one-sample shard, the comparison, the preview
  // and the decoded video the request asks for, each reported.
  void write(const at::Tensor& latents);

  const SamplingRequest& request() const { return request_; }
  const WanConfig& config() const { return config_; }
  const std::vector<int64_t>& shape() const { return shape_; }  // [1, C, F, H, W]
  bool two_experts() const { return experts_; }
  double cfg() const { return cfg_low_; }                             // the low-noise expert's with two
  const StepCaching* step_caching() const { return caching_.get(); }  // nullptr: none

 private:
  struct Condition;
  void use_two_experts_of_a_folder();
  void check_request() const;
  void resolve_model();
  void resolve_settings();
  void resolve_condition();
  void resolve_step_cache();
  void report_memory() const;
  // sample()'s parts: the VAE and the prompt's embeddings; the models (and
  // the ranks' groups) from their recipes; the picture a sample starts from.
  struct Models;
  void resolve_vae_tiling();
  void resolve_tiles(double available, int64_t width, int64_t height);
  void encode_prompt();
  std::unique_ptr<Models> load_models();
  void split_ranks(Models& models) const;
  at::Tensor start_from_image();
  at::Tensor start_from_control();
  void start_from_fun_control();
  std::array<int64_t, 3> sample_pixels() const;

  distributed::World& world_;
  SamplingRequest request_;
  c10::Device device_;
  std::string cache_home_;  // what the step cache's calibration sits beside
  bool experts_ = false, offload_ = false, run_shift_ = false;
  WanConfig config_;
  std::map<std::string, TensorSource> sources_;
  VideoVaeConfig vae_config_;
  std::optional<VaeTiling> vae_tiling_;  // the VAE's tiles; nullopt: whole frames
  std::optional<ReleaseSampling> release_;
  at::ScalarType block_linear_dtype_ = at::kFloat;
  double cfg_low_ = 5, cfg_high_ = 5, boundary_ = 0;
  std::string negative_prompt_;  // with a prompt: the unconditional branch's text ("": the all-zero context)
  std::vector<int64_t> shape_;
  std::unique_ptr<Condition> condition_;
  std::unique_ptr<StepCaching> caching_;  // the request's step cache; nullptr: none
};

}  // namespace wt::wan
