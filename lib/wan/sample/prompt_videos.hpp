// Videos of a prompt file's prompts, drawn during training (wantrain
// --sample-prompts, sample/sample_prompts.hpp): at each draw every prompt is
// sampled as wansample samples it (the run's solver, steps, shift and
// guidance, from its seed's noise), decoded by the VAE and written to
// <directory>/step-N/NN.mp4 (NN: the prompt's place in the file, from 00).
//
// The prompts are spread over the ranks (prompt i to rank i % ranks). Each
// rank encodes its prompts with umT5 once, at construction, and frees the
// encoder; the VAE (and CLIP, for pictures) is loaded at each draw and freed
// after it, so training holds none of the encoders between draws.
//
// A line's unconditional branch is its --negative-prompt's embedding, or
// the all-zero context that --text-drop trains (docs/training.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/train/train_log.hpp"
#include "wantrain/wan/encoders/text_encoder.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/sample/model_velocity.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"

namespace wt::wan {

struct PromptVideoOptions {
  std::string prompts_file;  // what errors name
  std::vector<SamplePrompt> prompts;
  TextEncoderFiles t5;  // text_len: the model's
  std::string vae, vae_config;
  at::ScalarType vae_dtype = at::kFloat;
  VaeTilingChoice vae_tiling;  // auto: tiles when a video's whole-frame decode does not fit in what is free then
  std::string clip;            // image-to-video models with the CLIP branch, for lines with --image
  at::ScalarType clip_dtype = at::kFloat;
  SamplerOptions sampler;                     // a line's --steps and --cfg replace steps and cfg
  uint64_t seed = 0;                          // of a line without --seed
  std::array<int64_t, 3> latents{};           // latent F, H, W of a line without --frames or --size
  at::ScalarType compute_dtype = at::kFloat;  // autocast, as trained
  std::string directory;                      // <output-dir>/samples
  double fps = 0;                             // 0: the VAE's release
  int rank = 0, ranks = 1;
  // false: this rank helps draw (its share of the tokens) and writes nothing.
  bool decode = true;
};

class PromptVideos {
 public:
  // Checks every line against the model and the VAE (frames 4k + 1, sizes
  // multiples of the VAE's stride times the patches, a picture where the
  // model needs one and only there): a UsageError of one line per bad line,
  // "FILE:LINE: what". Then encodes this rank's prompts on `device`.
  PromptVideos(const WanConfig& config, PromptVideoOptions options, const c10::Device& device);

  // This rank's videos, drawn with `model` as it is (the caller puts the
  // weights to draw with in, in eval mode, with no autograd). A video that
  // cannot be written is a warning and an empty path; training goes on.
  // `high`: Wan2.2 A14B's high-noise expert, taking the steps at or above
  // its boundary (with the same guidance).
  std::vector<train::SampleVideo> draw(WanModelImpl& model, int64_t step, const HighNoiseModel* high = nullptr) const;

  // The prompts this rank draws.
  size_t size() const { return mine_.size(); }

 private:
  struct Prompt {
    SamplePrompt line;
    int64_t index = 0;             // in the file's order
    std::vector<int64_t> shape;    // [1, C, F, H, W]
    at::Tensor context, negative;  // [L, D] fp32 on the CPU; negative undefined: the all-zero context
  };
  WanConfig config_;
  PromptVideoOptions options_;
  VideoVaeConfig vae_config_;
  std::vector<Prompt> mine_;
};

}  // namespace wt::wan
