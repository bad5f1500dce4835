// What one sample asks for, in typed settings (wansample's options parsed,
// or a program's own): the model and its weights, what the sample is
// conditioned on, the solver and its guidance, how the ranks share the work,
// and where the latents and the video go. An unset optional means "the
// release's, or the run's" (sample/sampling_pipeline.hpp resolves them).
//
// Errors about a setting name it as below (SettingError), and the tool maps
// those names to its options (wansample: --high-noise for high_noise, ...).
#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/sample/step_cache.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"

namespace wt::wan {

enum class CheckpointWeightsChoice { Auto, Ema, Model };

struct SamplingRequest {
  // The model: weights + model_config, a checkpoint (model_config optional,
  // checked against the stored one), or A14B's two experts.
  std::string weights, checkpoint, high_noise, low_noise, model_config;
  CheckpointWeightsChoice checkpoint_weights = CheckpointWeightsChoice::Auto;
  double boundary = 0;           // two experts: 0 = the release's
  bool offload_experts = false;  // two experts on a GPU: the idle one in host memory
  std::optional<at::ScalarType>
      weights_dtype;  // the blocks' Linears (fp32, bf16, fp8); unset: bf16 for a released model
  std::vector<std::string> loras, loras_high, loras_low;
  std::vector<double> lora_scales;  // one for all, or one per lora; empty: 1

  // What it is conditioned on: exactly one of prompt, data, text.
  std::string prompt;
  std::optional<std::string> negative_prompt;  // unset: the rule of release_defaults.hpp
  std::string t5, t5_config, tokenizer;
  at::ScalarType t5_dtype = at::kBFloat16;
  std::string data, text;
  int64_t index = 0;  // the sample of data, the row of text
  // prompt: video frames and WIDTHxHEIGHT (0: the release's); text: latent
  // frames and HxW.
  int64_t frames = 0;
  std::optional<std::array<int64_t, 2>> size;
  std::string image, last_image, clip;  // a picture to start from, and its CLIP encoder
  at::ScalarType clip_dtype = at::kFloat;
  int64_t max_area = 0;      // with image and no size: the video's pixels (0: the release's)
  bool first_frame = false;  // ti2v with data: the sample's own first latent frame
  // A VACE model's control (vace_condition.hpp): a video to keep where
  // src_mask is 0 and remake where it is 1, pictures of what to show; each
  // optional (no video: grey, no mask: all made), all through the VAE. The
  // hints are added times vace_scale.
  std::string src_video, src_mask;
  std::vector<std::string> src_ref_images;
  double vace_scale = 1.0;
  // A Fun-Control model's control (fun_control_condition.hpp): a control
  // video (image is its start picture) and, for a V1.1 model, a reference
  // picture; each optional (none: zeros, as VideoX-Fun's pipeline).
  std::string control_video, ref_image;
  std::string noise;  // an HDF5 /noise to start from instead of the seed's
  uint64_t seed = 0;

  // The solver and guidance.
  std::optional<Solver> solver;           // unset: a few-step student's own (sample/student_sampler.hpp), else unipc
  Schedule schedule = Schedule::Release;  // UniPC's sigmas: the release's, or diffusers' WanPipeline's
  std::optional<int> steps;
  std::optional<double> shift;  // unset: the checkpoint run's, else the release's, else 5
  std::vector<double> cfg;      // one scale, or LOW,HIGH with two experts; empty: the release's, else 5
  at::ScalarType compute_dtype = at::kFloat;
  int64_t attention_chunk = -1;
  // Step caching (step_cache.hpp), and the calibration file it reads
  // (empty: the one beside the weights, else the published figures).
  StepCacheSettings cache;
  std::string cache_calibration;  // wan_model.hpp's set_attention_chunk

  // The ranks (every rank of the world runs the same request).
  int sp = 0;  // 0: all ranks (half with cfg_parallel)
  bool cfg_parallel = false, shard_weights = false;

  // The outputs (rank 0 writes them).
  std::string out = "sample.h5";  // the latents as a one-sample shard
  std::string png;                // a preview of the latents
  std::string vae, vae_config;
  at::ScalarType vae_dtype = at::kFloat;
  VaeTilingChoice vae_tiling;  // the VAE's tiles (vae_tiling.hpp)
  std::string video, frames_dir;
  double fps = 0;        // 0: the release's
  bool compare = false;  // the sample against data's own latents
};

}  // namespace wt::wan
