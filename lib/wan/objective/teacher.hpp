// The frozen teacher of a distillation run (`wantrain --mode distill`): a
// WanModel loaded on every rank from safetensors (a file or an index,
// official or diffusers names) or from a wantrain checkpoint (its EMA
// weights when it has them, else its model). No gradients, not in the
// Reducer, never in a checkpoint: checkpoints store its path and checksum.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "wantrain/wan/model/model_condition.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/projection.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {
class WanModelImpl;
}

namespace wt::wan {

// The teacher's config: --teacher-config, or the model_config of a teacher
// checkpoint (checked against --teacher-config when both are given).
// UsageError naming the option when neither gives one or the file is bad.
WanConfig resolve_teacher_config(const std::string& teacher_path, const std::string& config_path);

class Teacher {
 public:
  // UsageError naming --teacher, the file and the tensors for a file that
  // does not load into a model of `config` (missing, extra or
  // mis-shaped tensors, a corrupt file); `config_source` names the config
  // in that line (the --teacher-config file). `linear_dtype` kBFloat16
  // holds the Linear weights of the blocks and of the text embedding
  // (nearly all parameters) in bf16 and runs the teacher under bf16
  // autocast; norms, modulation, time embedding and head stay fp32, as Wan
  // computes them. The model is allocated in that precision, unwritten, and
  // each tensor is read from the file and converted into it one at a time:
  // no fp32 copy of a bf16 teacher ever exists. It starts on the CPU; move
  // it with to(device).
  Teacher(const std::string& path, const WanConfig& config, const std::string& config_source,
          at::ScalarType linear_dtype = at::kFloat);
  ~Teacher();
  Teacher(const Teacher&) = delete;
  Teacher& operator=(const Teacher&) = delete;

  const std::string& path() const { return path_; }
  const WanConfig& config() const { return config_; }
  // "crc32:xxxxxxxx" of the model config (JSON) and of the parameters as
  // loaded (name, then fp32 bytes, in registration order): the same model
  // gives the same checksum whatever the file layout or names.
  const std::string& checksum() const { return checksum_; }
  const std::string& source() const { return source_; }  // what was loaded, in words
  io::NamedTensors weights() const;                      // by official name, as held
  // The teacher's file again, one tensor at a time as stored (what a
  // student's projection reads: the weights before any bf16 rounding).
  const TensorSource& file_tensors() const { return file_; }
  // Its weights before any bf16 rounding, what a student starts from:
  // file_tensors() when held in bf16, else the tensors as loaded.
  TensorSource unrounded_weights() const;

  bool held_in_bf16() const { return bf16_; }
  // A LoRA few-step student's frozen base holds the teacher's weights: each
  // teacher parameter that a frozen parameter of `base` (the same name,
  // shape and dtype) holds bit for bit is replaced by that tensor, on
  // base's device, and the teacher's own copy is freed. Call it before
  // to(device), which then moves only what is not shared. What is shared:
  struct Sharing {
    int64_t tensors = 0, of = 0;
    double bytes = 0;
  };
  Sharing share_frozen_weights(const WanModelImpl& base);
  // The other way: each frozen parameter of `model` that the teacher holds
  // bit for bit (the same name, shape and dtype) becomes the teacher's
  // tensor, on the teacher's device, and the model's own copy is freed (a
  // LoRA fake score's base). Call it after to(device).
  Sharing lend_frozen_weights(WanModelImpl& model) const;
  void to(at::Device device);
  // Attention over this many queries at a time (WanModel::set_attention_chunk; nn::kFusedAttention
  // the fused kernel; 0 the whole score matrix; nn::kAutoAttentionChunk: chosen per forward from the
  // teacher's heads and the batch's tokens).
  void set_attention_chunk(int64_t queries);

  // For an image student (temporal patch 1) of a video teacher (temporal
  // patch pt > 1): each input frame is shown to the teacher as a still of
  // pt frames, and its pt output frames are averaged, as the projection
  // assumes (wan/model/projection.hpp).
  void show_frames_as_stills(bool on) { stills_ = on; }
  bool shows_frames_as_stills() const { return stills_; }

  // The teacher's prediction for the student's very input: fp32, no autograd.
  // Runs under `compute_dtype` autocast; under bf16 when held in bf16, and
  // when the run is fp16 (a forward pass cannot be loss-scaled).
  // An image-to-video teacher also sees the student's image condition.
  at::Tensor predict(const at::Tensor& x_t, const at::Tensor& timesteps, const at::Tensor& context,
                     at::ScalarType compute_dtype, const ModelCondition& image = {}) const;

 private:
  std::string path_, checksum_, source_;
  WanConfig config_;
  std::shared_ptr<WanModelImpl> model_;
  TensorSource file_;  // its file's index (headers only), kept for the projection
  bool bf16_ = false, stills_ = false;
};

}  // namespace wt::wan
