// TrainConfig: every option of `wantrain`, declared once (train_config.cpp)
// for the command line, the --config INI file, --help and the start-up table,
// and its mapping onto the library's typed settings (wan::TrainSettings):
// the one place where option text becomes enums.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "wantrain/app/training_options.hpp"
#include "wantrain/wan/run/train_settings.hpp"

namespace wt {
class OptionSet;
}

namespace wt::wantrain {

// AdamW's (beta1, beta2), written "0.9,0.999".
struct Betas {
  double beta1 = 0.9, beta2 = 0.999;
};
std::istream& operator>>(std::istream& in, Betas& betas);
std::ostream& operator<<(std::ostream& out, const Betas& betas);

// The options shared with every training tool (app::TrainingOptions:
// output dir, seed, steps, lr, checkpoints, ...) and wantrain's own.
struct TrainConfig : app::TrainingOptions {
  // general
  std::string config_file;
  std::string mode = "train";
  bool require_gpu = false;  // refuse to compute on the CPU when the job's nodes have NVIDIA GPUs

  // watching a run
  bool tensorboard = true;
  std::int64_t sample_every = 0;
  std::int64_t sample_index = 0;
  std::string sample_solver = "unipc";
  int sample_steps = 50;
  double sample_cfg = 5.0;
  // Step caching of the samples (wansample --cache): method, threshold (< 0: the method's), calibration file.
  std::string sample_cache = "none", sample_cache_calibration;
  std::string sample_cache_threshold = "auto", sample_cache_keep_first = "auto";  // auto: the method's
  // --sample-prompts: videos of a prompt file's prompts at each sample.
  int sample_ranks = 0;  // the job's last K ranks draw the samples while the others train (wan/run/sample_ranks.hpp)
  std::string sample_prompts, t5, t5_config, t5_dtype = "bf16", tokenizer, vae, vae_config, vae_dtype = "fp32",
                                             vae_tiling = "auto", clip, clip_dtype = "fp32";

  // data
  std::string data;
  int prefetch = 2;
  bool shard_affinity = false;
  std::string val_data;

  // model
  std::string model_config;
  std::string init;
  std::string plan_latents;          // "FxHxW": latents for the memory plan when there is no --data
  std::string plan_device = "auto";  // the device the memory plan is for: auto (the run's), cpu, cuda
  double gpu_memory = 0;             // GiB of each GPU a GPU plan is held against (0: the visible GPU's, else 80)

  // objective
  std::string timestep_sampling = "uniform";
  double logit_mean = 0.0;
  double logit_std = 1.0;
  double shift = 5.0;
  std::string timestep_range;               // "LO,HI" of sigma after the shift; empty: [0, 1]
  double text_drop = 0.1;                   // caption dropout to the unconditional context (CFG)
  double image_drop = 0;                    // image dropout: zeroed CLIP features (image-to-video)
  double control_drop = 0, start_drop = 0;  // Fun-Control: zeroed control latents, start frame latents
  // Fun-Control V1.1 on data with a reference frame: shown instead of the start; its latents zeroed
  double ref_other_frame = 0.6, ref_drop = 0;
  std::string condition = "none";  // none or first-frame (Wan2.2 TI2V)
  double first_frame_prob = 1;     // with first-frame: the fraction of samples that keep their first frame

  // optimisation
  Betas betas;
  bool scale_lr = false;
  std::string precision = "fp32";
  std::string grad_checkpoint = "none";   // none, blocks or every-N
  std::string attention_chunk = "fused";  // fused, auto, 0 (all queries at once) or queries per chunk

  // distributed
  std::string backend = "auto";
  double bucket_mb = 25.0;
  std::string grad_comm_dtype = "fp32";
  int zero = 0;                       // ZeRO stage
  std::string gather_dtype = "auto";  // ZeRO-3: auto (bf16 under --precision bf16, else fp32), fp32 or bf16
  int sp = 1;                         // ranks per sequence-parallel group (Ulysses); 1: off
  // Wan2.2 A14B's two experts in one job (wan/run/expert_groups.hpp): "high,low" or
  // "low,high" (the order of the rank groups); empty: one model.
  std::string experts, expert_ranks;  // expert_ranks "H,L": ranks per group, in that order
  double boundary = 0;                // sigma' between the experts; 0: the release's for the model type
  std::string high_noise, low_noise;  // each expert's starting weights (else --init)
  bool allow_unused = false;

  // checkpoints
  bool keep_best = false;

  // distillation
  std::string teacher;
  std::string teacher_config;
  std::string student_init = "projection";
  std::string teacher_precision = "fp32";
  double distill_target_weight = 0.0;
  int distill_steps = 0;  // 0: the teacher's velocity at the same steps; K: a K-step student
  int distill_teacher_steps = 48;
  double distill_guidance = 5.0;
  std::string distill_method = "dmd";  // a few-step student's: "dmd" or "consistency"
  double distill_regression = 0.5;     // dmd: the regression term's weight
  int distill_regression_steps = 4;    // dmd: the teacher's Euler steps to its target
  int fake_score_lora_rank = 0;        // dmd: the fake score as adapters of this rank on the teacher (0: in full)

  // The options given on the command line or in the INI file (not left at
  // their defaults): a few-step student's samples take its own sampler
  // where --sample-solver, --sample-steps and --sample-cfg are not given.
  std::set<std::string> given;

  // faults
  std::int64_t max_skipped = 20;

  // lora
  std::int64_t lora_rank = 0;
  double lora_alpha = 0;
  std::string lora_targets;
  double lora_dropout = 0;
  std::string trainable = "all";        // vace: a VACE model's VACE blocks alone
  std::string base_precision = "auto";  // auto: bf16 with LoRA
  int64_t blocks_to_swap = 0;
  bool activation_offload = false;
  double checkpoint_timeout = 3600;
};

// Declares every option of `cfg` in `options` (fields are filled by parse()).
void declare_options(OptionSet& options, TrainConfig& cfg);

// Cross-field and range checks; throws UsageError naming the option.
void validate(const TrainConfig& cfg);

// The job's typed settings for these (validated) options: what
// wan::run_training_job takes. fit.run_options is left to the caller (the
// resolved options' record).
wan::TrainSettings train_settings(const TrainConfig& cfg);

}  // namespace wt::wantrain
