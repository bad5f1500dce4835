#include "train_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdlib>
#include <istream>
#include <ostream>

#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/sample/cache_calibration.hpp"

namespace wt::wantrain {

std::istream& operator>>(std::istream& in, Betas& betas) {
  char comma = 0;
  Betas parsed;
  if (in >> parsed.beta1 >> comma >> parsed.beta2 && comma == ',' && parsed.beta1 >= 0 && parsed.beta1 < 1 &&
      parsed.beta2 >= 0 && parsed.beta2 < 1)
    betas = parsed;
  else
    in.setstate(std::ios::failbit);
  return in;
}

std::ostream& operator<<(std::ostream& out, const Betas& betas) { return out << betas.beta1 << ',' << betas.beta2; }

namespace {

// What is trained and how: general, watching, data, model, objective, optimisation.
void declare_run_options(OptionSet& o, TrainConfig& c) {
  using T = app::TrainingOption;
  o.group("general").standard_options(&c.config_file);
  declare_training_options(o, c, {T::OutputDir});
  o.choice("mode", &c.mode, {"train", "distill"}, "what to run");
  declare_training_options(o, c, {T::Seed, T::DryRun, T::LogEvery, T::Threads});
  o.group("watching a run")
      .flag("tensorboard", &c.tensorboard,
            "write TensorBoard event files into OUTPUT-DIR/tb (--tensorboard=false: none)")
      .add("sample-every", &c.sample_every,
           "draw a sample every N steps and after the last one, with the EMA weights (or the weights), into "
           "OUTPUT-DIR/samples/ (0: never)")
      .add("sample-ranks", &c.sample_ranks,
           "with --sample-every: the job's last N ranks do not train but draw the samples (the weights sent to "
           "them, training going on meanwhile; a sample they are too busy for is dropped with one line; each "
           "video's tokens split over the N ranks); 0: the training ranks draw them between steps")
      .add("sample-index", &c.sample_index, "the training sample whose prompt is drawn and compared with")
      .add("sample-solver", &c.sample_solver, "unipc, dpm++ or euler: the solver of each sample (wansample --solver)")
      .add("sample-steps", &c.sample_steps, "solver steps of each sample (wansample --steps)")
      .add("sample-cfg", &c.sample_cfg, "classifier-free guidance of each sample (wansample --cfg)")
      .choice("sample-cache", &c.sample_cache, {"none", "teacache", "magcache", "easycache"},
              "step caching of the samples and prompt videos (wansample --cache): easycache needs no calibration; "
              "teacache and magcache need --sample-cache-calibration (or a released Wan2.1 --init's published one)")
      .add("sample-cache-threshold", &c.sample_cache_threshold,
           "auto|X: the sample cache's threshold (wansample --cache-threshold; auto: the method's)")
      .add("sample-cache-keep-first", &c.sample_cache_keep_first,
           "auto|N: steps each sample runs first whatever the cache's rule (wansample --cache-keep-first)")
      .add("sample-cache-calibration", &c.sample_cache_calibration,
           "the calibration --sample-cache teacache|magcache reads: a file of wansample --calibrate-cache, e.g. of "
           "the run's --init (the model moves from it as it trains)")
      .add("sample-prompts", &c.sample_prompts,
           "with --sample-every: also a video of each prompt in this file (one a line, each with optional --size, "
           "--frames, --seed, --image, --negative-prompt, --steps, --cfg) into OUTPUT-DIR/samples/step-N/NN.mp4, "
           "spread over the ranks; needs --t5, --tokenizer and --vae")
      .add("t5", &c.t5, "with --sample-prompts: umT5 weights (models_t5_umt5-xxl-enc-bf16.pth), as wansample --t5")
      .add("t5-config", &c.t5_config, "umT5 shape as JSON (the official constructor's keys); default umT5-XXL")
      .choice("t5-dtype", &c.t5_dtype, {"bf16", "fp32"}, "umT5 weights and compute (the release is bf16)")
      .add("tokenizer", &c.tokenizer, "with --sample-prompts: umT5's spiece.model, or the folder holding it")
      .add("vae", &c.vae, "with --sample-prompts: the VAE that decodes the videos (Wan2.1_VAE.pth, Wan2.2_VAE.pth)")
      .add("vae-config", &c.vae_config, "VAE shape as JSON; default the released shape of the VAE --vae holds")
      .choice("vae-dtype", &c.vae_dtype, {"fp32", "bf16"}, "VAE weights and compute")
      .add("vae-tiling", &c.vae_tiling,
           "auto|off|WxH: decode the videos in tiles of WxH pixels, as wansample --vae-tiling (auto: 256x256 tiles "
           "when a video's whole-frame decode does not fit in the memory free at the time)")
      .add("sample-clip", &c.clip,
           "with --sample-prompts and an image-to-video model with the CLIP branch: the CLIP image encoder for "
           "the lines' --image (wansample --clip; wantrain's --clip clips gradients)")
      .choice("sample-clip-dtype", &c.clip_dtype, {"fp32", "bf16"}, "CLIP weights and compute");
  o.group("data").add("data", &c.data, "training dataset: a directory of HDF5 shards (*.h5)");
  declare_training_options(o, c, {T::BatchSize});
  o.add("prefetch", &c.prefetch, "batches the loader reads ahead");
  declare_training_options(o, c, {T::NoDropLast});
  o.flag("shard-affinity", &c.shard_affinity, "each rank reads only its own whole shards (node-local storage)")
      .add("val-data", &c.val_data, "validation dataset directory");
  declare_training_options(o, c, {T::ValEvery});
  o.group("model")
      .add("model-config", &c.model_config, "model config JSON (Wan keys), e.g. data/configs/wan-tiny.json")
      .add("init", &c.init, "weights to start from: safetensors file or index, torch.save .pth, or a checkpoint")
      .add("plan-latents", &c.plan_latents,
           "FxHxW: the latent frames, height and width the memory plan assumes without --data (480p, 81 frames: "
           "21x60x104)")
      .choice("plan-device", &c.plan_device, {"auto", "cpu", "cuda"},
              "the device the memory plan is for: auto (this run's: a GPU when the rank sees one), or cuda to plan "
              "a GPU job where no GPU is visible (a login node; with --dry-run)")
      .add("gpu-memory", &c.gpu_memory,
           "GiB of each GPU that a plan for GPUs is held against (0: the visible GPU's; 80 when none is visible)");
  o.group("objective")
      .choice("timestep-sampling", &c.timestep_sampling, {"uniform", "logit-normal"}, "how sigma is drawn")
      .add("logit-mean", &c.logit_mean, "mean of logit-normal sigma sampling")
      .add("logit-std", &c.logit_std, "standard deviation of logit-normal sigma sampling")
      .add("shift", &c.shift, "sigma shift s: sigma' = s*sigma/(1+(s-1)*sigma)")
      .add("timestep-range", &c.timestep_range,
           "LO,HI: train on sigma' in [LO, HI] only (0 <= LO < HI <= 1; sigma' = timestep / 1000), e.g. 0.875,1 for "
           "Wan2.2's high-noise expert")
      .add("text-drop", &c.text_drop,
           "probability that a sample's text context is replaced by the unconditional (all-zero) one that "
           "wansample's classifier-free guidance uses")
      .add("image-drop", &c.image_drop,
           "image-to-video models with the CLIP branch: probability that a sample's CLIP features are zeroed (the "
           "first frame's latents in y are always kept)")
      .add("control-drop", &c.control_drop,
           "Fun-Control models: probability that a sample's control video latents are zeroed (VideoX-Fun's "
           "train_control.py: 0.1)")
      .add("start-drop", &c.start_drop,
           "Fun-Control models: probability that a sample's start frame latents are zeroed (VideoX-Fun's "
           "train_control.py: 0.1)")
      .add("ref-other-frame", &c.ref_other_frame,
           "Fun-Control V1.1 models on data of wandata encode --condition fun-control-ref: probability that a "
           "sample is shown another frame of its clip as the reference instead of its start frame (VideoX-Fun's "
           "train_control.py --control_ref_image random: 0.6)")
      .add("ref-drop", &c.ref_drop,
           "with --ref-other-frame: probability that the reference frame's latents are zeroed where it is shown "
           "(train_control.py: 0.1)")
      .choice("condition", &c.condition, {"none", "first-frame"},
              "first-frame (Wan2.2 TI2V models): a sample's first latent frame is kept clean, at timestep 0 and out "
              "of the loss, so the model learns to continue a picture; none: text to video")
      .add("first-frame-prob", &c.first_frame_prob,
           "with --condition first-frame: the probability that a sample keeps its first frame (the rest train text "
           "to video, as Wan2.2 mixes both)");
  o.group("optimisation");
  declare_training_options(o, c, {T::Steps, T::Epochs, T::Lr});
  o.add("betas", &c.betas, "AdamW betas, \"beta1,beta2\"");
  declare_training_options(o, c, {T::WeightDecay, T::Schedule, T::WarmupSteps});
  o.flag("scale-lr", &c.scale_lr, "scale --lr linearly with the effective batch");
  declare_training_options(o, c, {T::Clip, T::EmaDecay, T::GradAccum});
  o.choice("precision", &c.precision, {"fp32", "bf16", "fp16"}, "compute precision (master weights stay fp32)")
      .add("grad-checkpoint", &c.grad_checkpoint,
           "activation checkpointing: none, blocks (each Wan block keeps no activations and runs again in "
           "backward) or every-N (blocks 0, N, 2N, ...): less memory for about one more forward")
      .add("attention-chunk", &c.attention_chunk,
           "fused: LibTorch's fused scaled_dot_product_attention (flash or memory-efficient kernels), memory "
           "linear in the token count; Q: attention over Q queries at a time, recomputed per chunk in backward; "
           "0: the whole score matrix; auto: the whole matrix while its scores fit 1 GiB per block, else the "
           "chunk whose scores do");
}

// Where and with what it runs: distributed, checkpoints, LoRA, distillation, faults.
void declare_job_options(OptionSet& o, TrainConfig& c) {
  using T = app::TrainingOption;
  o.group("distributed")
      .choice("backend", &c.backend, {"auto", "mpi", "nccl"}, "collectives backend (auto: nccl with GPUs, else mpi)")
      .add("bucket-mb", &c.bucket_mb, "gradient bucket size in MiB")
      .choice("grad-comm-dtype", &c.grad_comm_dtype, {"fp32", "bf16", "fp16"},
              "the dtype gradients are reduced in: bf16 or fp16 halve the bytes between ranks, the sum rounded to "
              "16 bits (as PyTorch DDP's compression hooks)")
      .add("zero", &c.zero,
           "ZeRO stage: 0 (every rank keeps the whole AdamW state and EMA), 1 (each rank keeps 1/ranks of "
           "them: gradients reduce-scattered, weights all-gathered after the update), 2 (and 1/ranks of the "
           "gradients: buckets reduce-scattered every micro-step as they fill, no whole gradient kept) or 3 (and "
           "1/ranks of the weights: each block gathered just before its forward and again before its backward, "
           "and released after)")
      .choice("gather-dtype", &c.gather_dtype, {"auto", "fp32", "bf16"},
              "with --zero 3: the dtype the blocks' weights are gathered in (the fp32 slices stay the master "
              "weights); bf16 halves the gathered bytes and leaves autocast no weight copies to keep. auto: bf16 "
              "under --precision bf16, else fp32")
      .add("sp", &c.sp,
           "sequence parallelism (Ulysses): groups of this many consecutive ranks split each sample's tokens, "
           "self-attention exchanging them for heads (all-to-all); the ranks of a group read the same batch. "
           "Must divide the ranks and the model's heads; 1: off");
  declare_training_options(o, c, {T::CommTimeout});
  o.add("experts", &c.experts,
        "Wan2.2 A14B: high,low trains both experts in one job, on two rank groups (the first --expert-ranks "
        "ranks the first expert), each on its side of --boundary; their runs in OUTPUT_DIR/high_noise_model and "
        "low_noise_model")
      .add("expert-ranks", &c.expert_ranks, "with --experts: H,L ranks of the two groups (default: half each)")
      .add("boundary", &c.boundary,
           "with --experts: sigma' (timestep / 1000) at and above which the high-noise expert trains (0: the "
           "release's, 0.875 text-to-video, 0.9 image-to-video)")
      .add("high-noise", &c.high_noise, "with --experts: the high-noise expert's weights to start from (else --init)")
      .add("low-noise", &c.low_noise, "with --experts: the low-noise expert's weights to start from (else --init)");
  o.flag("require-gpu", &c.require_gpu,
         "refuse to compute on the CPU: a GPU per rank or an error line (without it, the CPU on a node with "
         "NVIDIA GPUs is one warning: a CPU-only build, --backend mpi, or two ranks on one GPU)")
      .flag("allow-unused", &c.allow_unused, "allow parameters that get no gradient (their slot is zero-filled)");
  o.group("checkpoints");
  declare_training_options(o, c, {T::SaveEvery, T::Keep});
  o.flag("keep-best", &c.keep_best, "also keep the checkpoint with the lowest validation loss");
  declare_training_options(o, c, {T::Resume, T::OnCkptError});
  o.group("lora")
      .add("lora-rank", &c.lora_rank, "LoRA fine-tuning: the adapters' rank (0: train the whole model)")
      .add("lora-alpha", &c.lora_alpha, "the adapters' output is scaled by alpha / rank (0: alpha = rank)")
      .add("lora-targets", &c.lora_targets,
           "each block's Linear layers that get adapters, comma-separated (self_attn.q ... cross_attn.o, ffn.0, "
           "ffn.2, a VACE block's before_proj and after_proj; empty: all)")
      .add("lora-dropout", &c.lora_dropout, "dropout on the adapters' input while training")
      .choice("trainable", &c.trainable, {"all", "vace"},
              "what is trained: the whole model, or with --lora-rank every block's adapters (all); a VACE model's "
              "VACE branch alone (vace: the base frozen, as DiffSynth-Studio trains VACE), in full, or its adapters "
              "with --lora-rank")
      .choice("base-precision", &c.base_precision, {"auto", "bf16", "fp8", "fp32"},
              "LoRA: the frozen base's block Linears held in bf16 (built and loaded straight into bf16, never an "
              "fp32 copy), fp8 (e4m3 with a scale per 64 inputs of a row, dequantised to bf16 per product) or "
              "fp32; auto: bf16")
      .flag("activation-offload", &c.activation_offload,
            "with --grad-checkpoint: each checkpointed block's input waits in host memory (page-locked on a GPU) "
            "until backward brings it back, one block ahead")
      .add("blocks-to-swap", &c.blocks_to_swap,
           "LoRA or --trainable vace: the frozen weights of the first N blocks held in host memory (page-locked on a "
           "GPU), each block "
           "copied to the device one block ahead of its forward and its backward, then dropped; 0: off");
  o.group("distillation")
      .add("teacher", &c.teacher,
           "teacher weights: safetensors file or index, torch.save .pth, or a checkpoint (its EMA if stored)")
      .add("teacher-config", &c.teacher_config, "teacher model config JSON (a checkpoint teacher carries its own)")
      .choice("student-init", &c.student_init, {"projection", "random"},
              "how a fresh student starts: projected from the teacher, or random (--init overrides both)")
      .choice("teacher-precision", &c.teacher_precision, {"fp32", "bf16"},
              "bf16 holds the teacher's block and text Linear weights in bf16 (half the memory)")
      .add("distill-target-weight", &c.distill_target_weight,
           "w in loss = MSE(student, teacher) + w * MSE(student, eps - x0)")
      .add("distill-steps", &c.distill_steps,
           "a few-step student: the teacher's own architecture, started from its weights (in full or with "
           "--lora-rank), learns to sample in this many Euler steps with guidance built in (--distill-method); 0: "
           "the student learns the teacher's velocity (same steps)")
      .choice("distill-method", &c.distill_method, {"dmd", "consistency"},
              "few-step: dmd, distribution matching with a fake score model trained beside the student (DMD, DMD2); "
              "consistency, phased consistency along the teacher's guided ODE (PCM)")
      .add("distill-regression", &c.distill_regression,
           "dmd: the weight of DMD's regression of each student sample on the teacher's sample from the same noise "
           "(what keeps a prompt's samples on its different videos); 0: distribution matching alone")
      .add("distill-regression-steps", &c.distill_regression_steps,
           "dmd: the teacher's guided Euler steps that give the regression's target")
      .add("fake-score-lora-rank", &c.fake_score_lora_rank,
           "dmd: train the fake score as LoRA adapters of this rank (alpha the rank) on the teacher's frozen "
           "weights, held once with the teacher's; 0: the fake score is a whole model trained in full")
      .add("distill-teacher-steps", &c.distill_teacher_steps,
           "few-step: the teacher's Euler steps along its ODE, a multiple of --distill-steps")
      .add("distill-guidance", &c.distill_guidance,
           "few-step: the teacher's classifier-free guidance scale that the student learns to sample with at cfg 1");
  o.group("faults")
      .add("max-skipped", &c.max_skipped,
           "consecutive skipped (non-finite) steps after which the run stops with status 1 (0: no limit)")
      .add("checkpoint-timeout", &c.checkpoint_timeout,
           "seconds rank 0 may wait for a checkpoint write before the job is ended; the other ranks wait with it "
           "(a slow write is not a dead rank: --comm-timeout does not apply)");
}

}  // namespace

void declare_options(OptionSet& o, TrainConfig& c) {
  declare_run_options(o, c);
  declare_job_options(o, c);
}

namespace {

void require(bool ok, const char* option, const std::string& expected) {
  if (!ok) throw UsageError(fmt::format("option --{}: {}", option, expected));
}

// --timestep-range as [min, max] of sigma after the shift; [0, 1] when unset.
std::pair<double, double> sigma_range(const TrainConfig& c) {
  if (c.timestep_range.empty()) return {0.0, 1.0};
  const auto parts = split_list(c.timestep_range);
  double lo = -1, hi = -1;
  char* end = nullptr;
  if (parts.size() == 2) {
    lo = std::strtod(parts[0].c_str(), &end);
    if (*end != '\0' || parts[0].empty()) lo = -1;
    hi = std::strtod(parts[1].c_str(), &end);
    if (*end != '\0' || parts[1].empty()) hi = -1;
  }
  if (lo > 1 || hi > 1)
    throw UsageError(
        fmt::format("option --timestep-range: {} looks like timesteps in [0, 1000]; give sigma' = "
                    "timestep / 1000 in [0, 1], e.g. 0.875,1",
                    c.timestep_range));
  if (!(lo >= 0 && lo < hi && hi <= 1))
    throw UsageError(
        fmt::format("option --timestep-range: expected LO,HI with 0 <= LO < HI <= 1, got {}", c.timestep_range));
  return {lo, hi};
}

// --grad-checkpoint as WanModel::set_grad_checkpoint's N: none 0, blocks 1,
// every-N N; UsageError naming the option otherwise.
int64_t grad_checkpoint_every(const TrainConfig& c) {
  if (c.grad_checkpoint == "none") return 0;
  if (c.grad_checkpoint == "blocks") return 1;
  const std::string prefix = "every-";
  if (c.grad_checkpoint.rfind(prefix, 0) == 0) {
    const std::string n = c.grad_checkpoint.substr(prefix.size());
    if (!n.empty() && n.size() <= 6 && n.find_first_not_of("0123456789") == std::string::npos && std::stoi(n) >= 1)
      return std::stoi(n);
  }
  throw UsageError(fmt::format("option --grad-checkpoint: expected none, blocks or every-N with N >= 1, got '{}'",
                               c.grad_checkpoint));
}

// --plan-latents as (F, H, W); UsageError naming the option when malformed.
std::array<int64_t, 3> plan_latents(const TrainConfig& c) {
  const auto sizes = parse_sizes(c.plan_latents, "FxHxW", "21x60x104", "plan-latents");
  return {sizes[0], sizes[1], sizes[2]};
}

// --experts as the experts of the rank groups, in rank order.
std::array<std::string, 2> expert_order(const TrainConfig& c) {
  const auto names = split_list(c.experts);
  if (names.size() != 2 || !((names[0] == "high" && names[1] == "low") || (names[0] == "low" && names[1] == "high")))
    throw UsageError(fmt::format(
        "option --experts: expected high,low (or low,high: the order of the rank groups), got {}", c.experts));
  return {names[0], names[1]};
}

// --expert-ranks "H,L" as two rank counts of 1 or more.
std::array<int64_t, 2> expert_ranks(const TrainConfig& c) {
  const auto parts = split_list(c.expert_ranks);
  std::array<int64_t, 2> ranks{-1, -1};
  for (size_t i = 0; i < parts.size() && i < 2; ++i) {
    char* end = nullptr;
    const long long value = std::strtoll(parts[i].c_str(), &end, 10);
    if (!parts[i].empty() && *end == '\0' && value >= 1 && value <= (1 << 24)) ranks[i] = value;
  }
  if (parts.size() != 2 || ranks[0] < 1 || ranks[1] < 1)
    throw UsageError(
        fmt::format("option --expert-ranks: expected H,L, two rank counts of 1 or more, got {}", c.expert_ranks));
  return ranks;
}

// --experts' options alone.
void check_expert_options(const TrainConfig& c) {
  if (c.experts.empty()) {
    for (const char* option : {"expert-ranks", "boundary", "high-noise", "low-noise"})
      if (c.given.count(option)) throw UsageError(fmt::format("option --{}: only with --experts high,low", option));
    return;
  }
  expert_order(c);
  if (!c.expert_ranks.empty()) expert_ranks(c);
  if (!(c.boundary >= 0 && c.boundary < 1))
    throw UsageError(fmt::format(
        "option --boundary: expected sigma' = timestep / 1000 in (0, 1) (0: the release's), got {}", c.boundary));
  if (!c.timestep_range.empty())
    throw UsageError("option --timestep-range: not with --experts: each expert trains on its side of --boundary");
  if (c.mode != "train") throw UsageError("option --experts: with --mode train only yet");
  // A sample of an A14B model needs both experts, which train on different ranks.
  if (c.sample_every > 0 && c.sample_ranks == 0)
    throw UsageError(
        "option --sample-every: with --experts, give --sample-ranks K: a sample needs both experts, and each "
        "group holds one; K ranks of their own receive both and draw it");
  for (const auto& [option, path] : {std::pair{"high-noise", c.high_noise}, {"low-noise", c.low_noise}})
    if (const auto why = path.empty() ? std::string() : unreadable_file_reason(path); !why.empty())
      throw UsageError(fmt::format("option --{}: {}: {}", option, path, why));
}

// --sample-ranks' options alone.
void check_sample_rank_options(const TrainConfig& c) {
  if (c.sample_ranks < 0) throw UsageError("option --sample-ranks: must be 0 (samples drawn inline) or more");
  if (c.sample_ranks > 0 && c.sample_every == 0)
    throw UsageError("option --sample-ranks: needs --sample-every N (when the weights go to the sample ranks)");
}

wan::LoraOptions lora_options(const TrainConfig& c) {
  return {c.lora_rank, c.lora_alpha, c.lora_dropout, split_list(c.lora_targets),
          c.trainable == "vace" && c.lora_rank > 0};
}

// ZeRO-3: the dtype the blocks are gathered in (--gather-dtype, auto resolved).
at::ScalarType gather_dtype(const TrainConfig& c) {
  if (c.zero != 3) return at::kFloat;
  if (c.gather_dtype == "auto") return c.precision == "bf16" ? at::kBFloat16 : at::kFloat;
  return app::float_dtype(c.gather_dtype);
}

train::RunSettings run_settings(const TrainConfig& c) {
  train::RunSettings s = app::run_settings(c);
  s.shard_affinity = c.shard_affinity;
  s.scale_lr = c.scale_lr;
  s.adamw.beta1 = c.betas.beta1;
  s.adamw.beta2 = c.betas.beta2;
  s.bucket_bytes = static_cast<int64_t>(c.bucket_mb * (1 << 20));
  s.grad_comm_dtype = app::float_dtype(c.grad_comm_dtype);
  s.allow_unused = c.allow_unused;
  s.zero = c.zero;
  s.sequence_parallel = c.sp;
  s.gather_dtype = gather_dtype(c);
  s.compute_dtype = app::float_dtype(c.precision);
  return s;
}

// How samples during training are drawn (of a training sample and of --sample-prompts).
wan::SamplerOptions sample_sampler(const TrainConfig& c) {
  wan::SamplerOptions sampler;
  sampler.solver = *wan::solver_from_name(c.sample_solver);
  sampler.steps = c.sample_steps;
  sampler.shift = c.shift;
  sampler.cfg = c.sample_cfg;
  if (c.distill_steps > 0) {  // a few-step student samples as it is trained to, unless told otherwise
    if (!c.given.count("sample-solver")) sampler.solver = wan::Solver::Euler;
    if (!c.given.count("sample-steps")) sampler.steps = c.distill_steps;
    if (!c.given.count("sample-cfg")) sampler.cfg = 1;
  }
  sampler.cache.method = wan::parse_cache_method(c.sample_cache);
  auto number = [](const std::string& text, const char* option) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value))
      throw UsageError(fmt::format("option --{}: '{}' is not auto or a number", option, text));
    return value;
  };
  if (c.sample_cache_threshold != "auto")
    sampler.cache.threshold = number(c.sample_cache_threshold, "sample-cache-threshold");
  if (c.sample_cache_keep_first != "auto")
    sampler.cache.keep_first = int(number(c.sample_cache_keep_first, "sample-cache-keep-first"));
  const auto method = sampler.cache.method;
  const bool calibrated = method == wan::CacheMethod::TeaCache || method == wan::CacheMethod::MagCache;
  if (!calibrated) {
    if (!c.sample_cache_calibration.empty())
      throw UsageError("option --sample-cache-calibration: only --sample-cache teacache and magcache read one");
    return sampler;
  }
  const auto config = wan::load_model_config(c.model_config.empty() ? c.init : c.model_config);
  if (c.sample_cache_calibration.empty() &&
      (c.init.empty() || !c.experts.empty() || !wan::published_calibration(config, c.init)))
    throw UsageError(fmt::format(
        "option --sample-cache {}: needs --sample-cache-calibration FILE (wansample --calibrate-cache of the run's "
        "start; only a released Wan2.1 model given as --init has published figures), or --sample-cache easycache",
        c.sample_cache));
  auto calibration_of = [&](const std::string& role) {
    return wan::find_calibration(method, c.sample_cache_calibration, c.init, config, role, {});
  };
  if (!c.experts.empty()) {
    sampler.high_cache_calibration = calibration_of("high_noise");
    sampler.cache_calibration = calibration_of("low_noise");
  } else {
    sampler.cache_calibration = calibration_of("model");
  }
  return sampler;
}

// `sampler`: sample_sampler(c), resolved once (its calibration read and reported once).
wan::WanRunOptions wan_run_options(const TrainConfig& c, const wan::SamplerOptions& sampler) {
  wan::WanRunOptions o;
  o.init = c.init;
  o.objective.flow = {
      c.timestep_sampling == "logit-normal" ? wan::TimestepSampling::LogitNormal : wan::TimestepSampling::Uniform,
      c.logit_mean, c.logit_std, c.shift};
  std::tie(o.objective.flow.sigma_min, o.objective.flow.sigma_max) = sigma_range(c);
  o.objective.text_drop = c.text_drop;
  o.objective.image_drop = c.image_drop;
  o.objective.control_drop = c.control_drop;
  o.objective.start_drop = c.start_drop;
  o.objective.ref_other_frame = c.ref_other_frame;
  o.objective.ref_drop = c.ref_drop;
  o.objective.first_frame_prob = c.condition == "first-frame" ? c.first_frame_prob : 0;
  o.objective.seed = c.seed;
  o.distill_target_weight = c.distill_target_weight;
  if (c.distill_steps > 0)
    o.few_step = wan::FewStepOptions{
        c.distill_steps,
        c.distill_teacher_steps,
        c.distill_guidance,
        c.distill_method == "dmd" ? wan::FewStepMethod::DistributionMatching : wan::FewStepMethod::Consistency,
        c.distill_regression,
        c.distill_regression_steps,
        /*same_calls_on_every_rank=*/false,
        c.fake_score_lora_rank};
  o.student_init = c.student_init == "random" ? wan::StudentInit::Random : wan::StudentInit::Projection;
  o.prefetch = c.prefetch;
  o.lora = lora_options(c);
  o.vace_branch_only = c.trainable == "vace" && c.lora_rank == 0;
  if (c.lora_rank > 0) o.base_dtype = app::float_dtype(c.base_precision == "auto" ? "bf16" : c.base_precision);
  // A base precision given without LoRA reaches the library's rule (wan::check_run_options), which refuses it.
  if (c.lora_rank == 0 && c.base_precision != "auto") o.base_dtype = at::kBFloat16;
  o.blocks_to_swap = c.blocks_to_swap;
  o.activation_offload = c.activation_offload;
  o.grad_checkpoint = grad_checkpoint_every(c);
  o.attention_chunk = app::parse_attention_chunk(c.attention_chunk);
  if (c.sample_every > 0) {
    wan::TrainingSampleOptions sample;
    sample.index = c.sample_index;
    sample.sampler = sampler;
    sample.first_frame = c.condition == "first-frame";
    sample.seed = c.seed;
    sample.directory = c.output_dir + "/samples";
    o.sample = sample;  // compute_dtype: the run's, set by WanRun
  }
  return o;
}

// --sample-prompts' settings: the file, its encoders, and the solver, steps,
// guidance and seed of the training sample (its prompts, latents and
// ranks are the run's to fill in).
wan::PromptVideoOptions prompt_video_options(const TrainConfig& c, const wan::SamplerOptions& sampler) {
  wan::PromptVideoOptions o;
  o.prompts_file = c.sample_prompts;
  o.t5 = {c.t5, c.t5_config, c.tokenizer, app::float_dtype(c.t5_dtype)};
  o.vae = c.vae;
  o.vae_config = c.vae_config;
  o.vae_dtype = app::float_dtype(c.vae_dtype);
  o.vae_tiling = wan::VaeTilingChoice::parse(c.vae_tiling);
  o.clip = c.clip;
  o.clip_dtype = app::float_dtype(c.clip_dtype);
  o.sampler = sampler;
  o.seed = c.seed;
  o.directory = c.output_dir + "/samples";
  return o;
}

train::FitOptions fit_options(const TrainConfig& c) {
  train::FitOptions o = app::fit_options(c);
  o.keep_best = c.keep_best;
  o.max_skipped = c.max_skipped;
  o.checkpoint_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(c.checkpoint_timeout * 1000));
  o.sharded_state = c.zero >= 1;
  o.tensorboard = c.tensorboard;
  o.sample_every = c.sample_every;
  return o;
}

}  // namespace

void validate(const TrainConfig& c) {
  app::check_training_options(c);
  check_expert_options(c);
  check_sample_rank_options(c);
  require(c.prefetch >= 1, "prefetch", "must be at least 1");
  require(c.sample_every >= 0, "sample-every", "must be 0 (never) or more");
  require(c.sample_index >= 0, "sample-index", "must be 0 or more");
  require(wan::solver_from_name(c.sample_solver).has_value(), "sample-solver", "must be unipc, dpm++ or euler");
  require(c.sample_steps >= 1, "sample-steps", "must be at least 1");
  require(c.sample_cfg >= 0, "sample-cfg", "must be 0 or more");
  require(c.sample_prompts.empty() || c.sample_every > 0, "sample-prompts",
          "needs --sample-every N (when the videos are drawn)");
  require(c.sample_prompts.empty() || (!c.t5.empty() && !c.tokenizer.empty() && !c.vae.empty()), "sample-prompts",
          "needs --t5, --tokenizer (to encode the prompts) and --vae (to decode the videos)");
  for (const auto& [option, path] : {std::pair{"sample-prompts", c.sample_prompts},
                                     {"t5", wan::t5_weights_file(c.t5)},
                                     {"vae", wan::vae_weights_file(c.vae)},
                                     {"clip", wan::clip_weights_file(c.clip)}})
    if (const auto why = path.empty() ? std::string() : unreadable_file_reason(path); !why.empty())
      throw UsageError(fmt::format("option --{}: {}: {}", option, path, why));
  require(c.logit_std > 0, "logit-std", "must be positive");
  require(c.shift > 0, "shift", "must be positive");
  sigma_range(c);            // throws on a malformed range
  grad_checkpoint_every(c);  // likewise
  if (!c.plan_latents.empty()) plan_latents(c);
  require(c.gpu_memory >= 0, "gpu-memory", "must be 0 (the visible GPU's) or a positive number of GiB");
  require(c.gpu_memory == 0 || c.plan_device != "cpu", "gpu-memory", "not with --plan-device cpu (a plan for the CPU)");
  require(c.timestep_range.empty() || c.mode != "distill", "timestep-range", "not available with --mode distill yet");
  require(c.text_drop >= 0 && c.text_drop <= 1, "text-drop", "must be a probability in [0, 1]");
  require(c.image_drop >= 0 && c.image_drop <= 1, "image-drop", "must be a probability in [0, 1]");
  require(c.control_drop >= 0 && c.control_drop <= 1, "control-drop", "must be a probability in [0, 1]");
  require(c.start_drop >= 0 && c.start_drop <= 1, "start-drop", "must be a probability in [0, 1]");
  require(c.ref_other_frame >= 0 && c.ref_other_frame <= 1, "ref-other-frame", "must be a probability in [0, 1]");
  require(c.ref_drop >= 0 && c.ref_drop <= 1, "ref-drop", "must be a probability in [0, 1]");
  require((c.control_drop == 0 && c.start_drop == 0 && c.ref_drop == 0) || c.mode != "distill",
          c.control_drop > 0 ? "control-drop"
          : c.start_drop > 0 ? "start-drop"
                             : "ref-drop",
          "not with --mode distill (its objectives drop no control)");
  require(c.first_frame_prob > 0 && c.first_frame_prob <= 1, "first-frame-prob", "must be a probability in (0, 1]");
  require(c.condition != "first-frame" || c.mode != "distill" || c.distill_steps > 0, "condition",
          "first-frame with --mode distill is for few-step students (--distill-steps K) only yet");
  app::parse_attention_chunk(c.attention_chunk);  // throws on a malformed value
  require(c.bucket_mb > 0, "bucket-mb", "must be positive");
  require(c.zero >= 0 && c.zero <= 3, "zero",
          "must be 0 (off), 1 (optimizer state and EMA sharded), 2 (and the gradients) or 3 (and the weights)");
  require(c.gather_dtype == "auto" || c.zero == 3, "gather-dtype", "needs --zero 3");
  require(c.gather_dtype != "bf16" || c.precision == "bf16", "gather-dtype",
          "bf16 gathers need --precision bf16 (fp32 compute reads fp32 weights)");
  require(c.zero != 3 || c.lora_rank == 0, "zero",
          "3 shards the trained weights, which with --lora-rank are the small adapters (the frozen base stays "
          "whole): use --zero 1 or 2");
  require(c.zero != 3 || c.blocks_to_swap == 0, "blocks-to-swap",
          "swaps a frozen base's blocks, and with --zero 3 the blocks are ZeRO-3's units (gathered around their "
          "use): use --zero 1 or 2 with block swap");
  require(c.sp >= 1, "sp", "must be at least 1 (1: off)");
  require(c.distill_target_weight >= 0, "distill-target-weight", "must be 0 or more");
  require(c.max_skipped >= 0, "max-skipped", "must be 0 (no limit) or more");
  require(c.lora_rank >= 0, "lora-rank", "must be 0 (no LoRA) or more");
  require(c.distill_steps >= 0, "distill-steps", "must be 0 (the teacher's velocity) or a number of steps");
  if (c.distill_steps > 0) {
    require(c.distill_teacher_steps >= c.distill_steps && c.distill_teacher_steps % c.distill_steps == 0,
            "distill-teacher-steps",
            fmt::format("must be a multiple of --distill-steps {} (each student step spans whole teacher steps)",
                        c.distill_steps));
    require(std::isfinite(c.distill_guidance) && c.distill_guidance >= 0, "distill-guidance",
            "must be 0 or more (1: no guidance)");
    require(c.distill_target_weight == 0, "distill-target-weight",
            "only with --distill-steps 0 (a few-step student has no velocity target of its own)");
    require(std::isfinite(c.distill_regression) && c.distill_regression >= 0, "distill-regression",
            "must be 0 (distribution matching alone) or more");
    require(c.distill_regression_steps >= 1, "distill-regression-steps", "must be 1 or more");
    require(c.fake_score_lora_rank >= 0, "fake-score-lora-rank", "must be 0 (a whole fake score) or a LoRA rank");
    if (c.distill_method == "consistency")
      for (const char* option : {"distill-regression", "distill-regression-steps", "fake-score-lora-rank"})
        require(!c.given.count(option), option, "only with --distill-method dmd");
    require(c.student_init == "projection", "student-init",
            "not with --distill-steps: a few-step student starts from the teacher's weights (or --init)");
  }
  if (c.lora_rank > 0) wan::check_lora_options(lora_options(c));
  require(std::isfinite(c.checkpoint_timeout) && c.checkpoint_timeout >= 0.001 && c.checkpoint_timeout <= 1e7,
          "checkpoint-timeout", "must be a positive number of seconds");
  if (c.mode == "distill") require(!c.teacher.empty(), "teacher", "--mode distill needs a teacher");
  if (c.mode != "distill") {  // distillation options in a training run: refused rather than ignored
    const char* only = "only used with --mode distill";
    require(c.teacher.empty(), "teacher", only);
    require(c.teacher_config.empty(), "teacher-config", only);
    require(c.student_init == "projection", "student-init", only);
    require(c.teacher_precision == "fp32", "teacher-precision", only);
    require(c.distill_target_weight == 0, "distill-target-weight", only);
    for (const char* option : {"distill-steps", "distill-teacher-steps", "distill-guidance", "distill-method",
                               "distill-regression", "distill-regression-steps", "fake-score-lora-rank"})
      require(!c.given.count(option), option, only);
  } else if (c.distill_steps == 0) {
    for (const char* option : {"distill-teacher-steps", "distill-guidance", "distill-method", "distill-regression",
                               "distill-regression-steps", "fake-score-lora-rank"})
      require(!c.given.count(option), option, "only with --distill-steps K");
  } else {  // a few-step student's points lie on the teacher's grid, drawn uniformly
    for (const char* option : {"timestep-sampling", "logit-mean", "logit-std"})
      require(!c.given.count(option), option,
              "not with --distill-steps: the student's points lie on the teacher's grid, drawn uniformly");
  }
}

wan::TrainSettings train_settings(const TrainConfig& c) {
  wan::TrainSettings s;
  s.data = c.data;
  s.val_data = c.val_data;
  s.model_config = c.model_config;
  if (c.mode == "distill")
    s.distill =
        wan::DistillSettings{c.teacher, c.teacher_config, c.teacher_precision == "bf16" ? at::kBFloat16 : at::kFloat};
  s.resume = c.resume;
  s.dry_run = c.dry_run;
  s.threads = c.threads;
  s.backend = c.backend == "nccl"  ? distributed::Backend::Nccl
              : c.backend == "mpi" ? distributed::Backend::Mpi
                                   : distributed::Backend::Auto;
  s.require_gpu = c.require_gpu;
  s.comm_timeout = app::comm_timeout(c);
  s.plan.device = c.plan_device == "cuda"  ? wan::PlanDevice::Cuda
                  : c.plan_device == "cpu" ? wan::PlanDevice::Cpu
                                           : wan::PlanDevice::Auto;
  s.plan.gpu_memory_gib = c.gpu_memory;
  if (!c.plan_latents.empty()) s.plan.latents = plan_latents(c);
  s.run = run_settings(c);
  const auto sampler = sample_sampler(c);
  s.model_run = wan_run_options(c, sampler);
  s.fit = fit_options(c);
  s.sample_index = c.sample_index;
  s.prompt_videos = prompt_video_options(c, sampler);
  s.sample_ranks = c.sample_ranks;
  if (!c.experts.empty()) {
    wan::ExpertSettings experts;
    experts.order = expert_order(c);
    if (!c.expert_ranks.empty()) experts.ranks = expert_ranks(c);
    experts.boundary = c.boundary;
    experts.high_noise = c.high_noise;
    experts.low_noise = c.low_noise;
    s.experts = experts;
  }
  return s;
}

}  // namespace wt::wantrain
