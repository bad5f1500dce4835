// What a drawn sample becomes, behind one interface: whatever drew the
// latents (wansample, the training sample, a prompt video: all through
// sampling_core.hpp), each output is one implementation of SampleOutput,
// and a caller writes the sample to the ones it wants. The TensorBoard
// images the training log shows are the outputs' own (PreviewPng::image,
// DecodedVideo::strip).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/media/image.hpp"
#include "wantrain/report/tensorboard_writer.hpp"
#include "wantrain/wan/sample/latent_preview.hpp"
#include "wantrain/wan/sample/video_output.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

struct DrawnSample {
  at::Tensor latents;    // [C, F, H, W] fp32 on the CPU
  at::Tensor reference;  // the dataset's own latents it was drawn for; undefined: none
};

class SampleOutput {
 public:
  virtual ~SampleOutput() = default;
  // Error naming the file when it cannot be written.
  virtual void write(const DrawnSample& sample) = 0;
};

// The latent preview (latent_preview.hpp): the sample above its reference,
// a PNG file at `path` (empty: none, the image only).
class PreviewPng final : public SampleOutput {
 public:
  explicit PreviewPng(std::string path = {}) : path_(std::move(path)) {}
  void write(const DrawnSample& sample) override;
  const LatentPreview& preview() const { return preview_; }
  report::Image image() const;  // the same PNG, for TensorBoard

 private:
  std::string path_;
  LatentPreview preview_;
};

// The VAE's decode (video_output.hpp): a video file and/or PNG frames, and
// a strip of frames chosen evenly over the video (the first and the last
// among them) side by side, for TensorBoard.
class DecodedVideo final : public SampleOutput {
 public:
  DecodedVideo(VideoVae& vae, VideoOutput output) : vae_(vae), output_(std::move(output)) {}
  void write(const DrawnSample& sample) override;
  int64_t frames() const { return frames_; }  // written by the last write
  const report::Image& strip() const { return strip_; }

 private:
  VideoVae& vae_;
  VideoOutput output_;
  int64_t frames_ = 0;
  report::Image strip_;
};

}  // namespace wt::wan
