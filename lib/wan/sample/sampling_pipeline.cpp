#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/sample/sampling_pipeline.hpp"

#include "wantrain/wan/model/reference_frame.hpp"
#include "wantrain/wan/sample/student_sampler.hpp"
#include "wantrain/train/run_plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <functional>
#include <limits>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/data/noise_file.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/data/text_file.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/sample/image_condition.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/encoders/text_encoder.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/checkpoint_weights.hpp"
#include "wantrain/wan/model/data_fits_model.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/sample/dataset_sample.hpp"
#include "wantrain/wan/sample/latent_comparison.hpp"
#include "wantrain/wan/sample/picture_start.hpp"
#include "wantrain/wan/sample/vace_condition.hpp"
#include "wantrain/wan/sample/fun_control_condition.hpp"
#include "wantrain/wan/model/fun_control_start.hpp"
#include "wantrain/wan/sample/sampling_core.hpp"
#include "wantrain/wan/sample/cache_calibration.hpp"
#include "wantrain/wan/sample/step_cache_calibration.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/sample/sharded_blocks.hpp"
#include "wantrain/wan/sample/sample_outputs.hpp"
#include "wantrain/wan/plan/decode_memory.hpp"
#include "wantrain/wan/vae/release_video.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

// What the sample is conditioned on, and where it comes from.
struct SamplingPipeline::Condition {
  at::Tensor context, negative;  // [L, D]; negative undefined: the all-zero context
  int32_t text_len = 0;
  at::Tensor reference;                   // a dataset sample's own latents [C, F, H, W]
  std::vector<int64_t> prompt_samples;    // with --compare: the samples of the reference's prompt, when several
  std::vector<at::Tensor> prompt_videos;  // their latents [C, F, H, W]
  ModelCondition image;                   // [1, ...]
  std::string source;                     // for the shard's description
  std::shared_ptr<VideoVae> vae;
};

namespace {

std::string cfg_text(double low, double high) {
  return low == high ? fmt::format("{:g}", low) : fmt::format("{:g},{:g}", low, high);
}

// The model config: model_config, or the one the checkpoint stores (checked
// against model_config when both are given).
WanConfig sampling_model_config(const SamplingRequest& r) {
  if (r.checkpoint.empty()) {
    // A diffusers folder brings its config.json; a model_config given too must agree with it.
    const std::string weights = r.weights.empty() ? r.low_noise : r.weights;
    const auto folder = find_transformer_folder(weights);
    if (!folder) return load_model_config(r.model_config);
    const auto stored = load_model_config(folder->folder);
    if (!r.model_config.empty())
      if (const auto difference = first_difference(load_model_config(r.model_config), stored); !difference.empty())
        throw SettingError("model_config",
                           fmt::format("{} and {} differ: {}", r.model_config, folder->config, difference));
    return stored;
  }
  const std::string stored = ckpt::read_model_config(r.checkpoint);
  if (!r.model_config.empty())
    ckpt::check_model_config(stored, r.checkpoint, to_json(load_model_config(r.model_config)),
                             setting_reference("model_config") + " " + r.model_config);
  return parse_model_config(stored, fmt::format("checkpoint {}: attribute model_config", r.checkpoint));
}

// The shift a checkpoint's run trained at, when it stored one: the shift its
// model samples well at (docs/training.md, "What good training looks like").
std::optional<double> run_shift(const std::string& checkpoint) {
  std::string stored;
  try {
    stored = ckpt::read_run_options(checkpoint);
  } catch (const UsageError&) {  // none stored, or not readable: the latter is reported when the weights are read
    return std::nullopt;
  }
  const auto run = nlohmann::json::parse(stored, nullptr, false);
  if (!run.is_object() || !run.contains("shift") || !run["shift"].is_string()) return std::nullopt;
  const std::string text = run["shift"].get<std::string>();
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value > 0)) return std::nullopt;
  return value;
}

// The sampler a few-step student was trained for: from its checkpoint, its
// weights file, or the first of its LoRA files that records one.
std::optional<StudentSampler> student_sampler(const SamplingRequest& r) {
  if (!r.checkpoint.empty()) return student_sampler_of_checkpoint(r.checkpoint);
  if (!r.weights.empty())
    if (auto sampler = student_sampler_of_weights(r.weights)) return sampler;
  for (const auto& lora : r.loras)
    if (auto sampler = student_sampler_of_weights(lora)) return sampler;
  return std::nullopt;
}

// Text embeddings [L, D] that the model reads: D its text_dim, L at most its text_len.
void check_context_fits(const at::Tensor& context, const WanConfig& config, const std::string& source,
                        const std::string& setting, const std::string& model_named) {
  if (context.size(1) != config.text_dim || context.size(0) > config.text_len)
    throw SettingError(
        setting, fmt::format("{}: text embeddings [{}, {}] do not fit model config {} (text_len {}, "
                             "text_dim {})",
                             source, context.size(0), context.size(1), model_named, config.text_len, config.text_dim));
}

// Whether a VACE model's control is given (otherwise a --data sample's own, or grey).
bool gives_vace_control(const SamplingRequest& r) { return !r.src_video.empty() || !r.src_ref_images.empty(); }

// Whether a Fun-Control model's inputs are given (otherwise a --data sample's own, or zeros).
bool gives_fun_control(const SamplingRequest& r) {
  return !r.control_video.empty() || !r.image.empty() || !r.ref_image.empty();
}

}  // namespace

SamplingPipeline::SamplingPipeline(distributed::World& world, SamplingRequest request, const c10::Device& device)
    : world_(world), request_(std::move(request)), device_(device) {
  cache_home_ = calibration_home(request_);  // before a two-expert folder becomes its experts
  // Checked on every rank alike: a mistake is one line for the job.
  world_.agree([&] {
    use_two_experts_of_a_folder();
    check_request();
    resolve_model();
    resolve_settings();
    resolve_condition();
    resolve_step_cache();
  });
  resolve_vae_tiling();
  report_memory();
}

SamplingPipeline::~SamplingPipeline() = default;

// A Wan2.2 A14B diffusers folder as weights: its two experts, and its
// boundary unless one is given.
void SamplingPipeline::use_two_experts_of_a_folder() {
  auto& r = request_;
  if (r.weights.empty()) return;
  const auto experts = find_two_experts(r.weights);
  if (!experts) return;
  if (r.boundary == 0 && experts->boundary_ratio) r.boundary = *experts->boundary_ratio;
  if (!r.loras.empty())
    throw SettingError("lora", fmt::format("{} holds two experts: give each its own LoRA with {} and {}", r.weights,
                                           setting_reference("lora_high"), setting_reference("lora_low")));
  report_info("{}: two experts, transformer/ the high-noise one and transformer_2/ the low-noise one{}", r.weights,
              experts->boundary_ratio
                  ? fmt::format(", boundary_ratio {:g} (model_index.json)", *experts->boundary_ratio)
                  : std::string());
  r.high_noise = experts->high_noise;
  r.low_noise = experts->low_noise;
  r.weights.clear();
}

// What the request asks, alone: each mistake a line naming its settings.
void SamplingPipeline::check_request() const {
  const auto& r = request_;
  const bool experts = !r.high_noise.empty() || !r.low_noise.empty();
  if (experts && (r.high_noise.empty() || r.low_noise.empty()))
    throw SettingError(SettingNames{"high_noise", "low_noise"},
                       "give both experts (Wan2.2 A14B's high_noise_model and low_noise_model)");
  if (experts && (!r.weights.empty() || !r.checkpoint.empty()))
    throw SettingError(
        SettingNames{"high_noise", "low_noise"},
        fmt::format("they replace {} and {}", setting_reference("weights"), setting_reference("checkpoint")));
  if (!experts && r.weights.empty() == r.checkpoint.empty())
    throw SettingError(SettingNames{"weights", "checkpoint"}, "give exactly one (the model weights to sample with)");
  if (!experts && (!r.loras_high.empty() || !r.loras_low.empty() || r.offload_experts || r.boundary != 0))
    throw SettingError(
        {"lora_high", "lora_low", "offload_experts", "boundary"},
        fmt::format("need two experts ({} and {})", setting_reference("high_noise"), setting_reference("low_noise")));
  if (experts && !r.loras.empty())
    throw SettingError("lora", fmt::format("with two experts, give each its own with {} and {}",
                                           setting_reference("lora_high"), setting_reference("lora_low")));
  if (r.boundary != 0 && !(r.boundary > 0 && r.boundary <= 1))
    throw SettingError("boundary", "must be in (0, 1] (a timestep / 1000)");
  for (const double scale : r.cfg)
    if (!(scale >= 0) || !std::isfinite(scale))
      throw SettingError("cfg", fmt::format("'{:g}' is not a guidance scale of 0 or more", scale));
  if (r.cfg.size() > 2 || (r.cfg.size() == 2 && !experts))
    throw SettingError("cfg",
                       fmt::format("'{}': give one scale{}", fmt::join(r.cfg, ","),
                                   experts ? ", or LOW,HIGH (one per expert)" : " (LOW,HIGH needs two experts)"));
  const bool folder = !r.weights.empty() ? bool(find_transformer_folder(r.weights))
                                         : !r.low_noise.empty() && find_transformer_folder(r.low_noise);
  if (r.checkpoint.empty() && r.model_config.empty() && !folder)
    throw SettingError("model_config",
                       fmt::format("the model config is required with {}",
                                   experts ? setting_reference("high_noise") + " and " + setting_reference("low_noise")
                                           : setting_reference("weights")));
  if (int(!r.data.empty()) + int(!r.text.empty()) + int(!r.prompt.empty()) != 1)
    throw SettingError(SettingNames{"prompt", "data", "text"}, "give exactly one (what the sample is conditioned on)");
  if (!r.prompt.empty() && (r.t5.empty() || r.tokenizer.empty()))
    throw SettingError(
        SettingNames{"t5", "tokenizer"},
        fmt::format("needed with {} (the umT5 weights and its spiece.model)", setting_reference("prompt")));
  if (r.negative_prompt && !r.negative_prompt->empty() && r.prompt.empty())
    throw SettingError("negative_prompt", fmt::format("needs {}", setting_reference("prompt")));
  if ((!r.video.empty() || !r.frames_dir.empty()) && r.vae.empty())
    throw SettingError(SettingNames{"video", "frames_dir"},
                       fmt::format("need {} (the decoder that makes pixels of the latents)", setting_reference("vae")));
  // The VAE decodes, encodes a picture, or encodes a VACE or Fun-Control model's control.
  if (!r.vae.empty() && r.video.empty() && r.frames_dir.empty() && r.image.empty() && r.src_video.empty() &&
      r.src_ref_images.empty() && r.control_video.empty() && r.ref_image.empty())
    throw SettingError("vae", fmt::format("give {} or {} (where the decoded frames go)", setting_reference("video"),
                                          setting_reference("frames_dir")));
  if (!r.image.empty() && r.vae.empty())
    throw SettingError(
        "image", fmt::format("needs {} (the encoder that makes the picture's latents)", setting_reference("vae")));
  for (const auto& [path, setting] :
       {std::pair{&r.image, "image"}, {&r.control_video, "control_video"}, {&r.ref_image, "ref_image"}})
    if (!path->empty() && r.prompt.empty() && r.text.empty())
      throw SettingError(
          setting, fmt::format("with {} or {} ({} samples bring their own condition)", setting_reference("prompt"),
                               setting_reference("text"), setting_reference("data")));
  if (!r.last_image.empty() && r.image.empty())
    throw SettingError("last_image", fmt::format("needs {}", setting_reference("image")));
  if (!r.clip.empty() && r.image.empty() && r.ref_image.empty())
    throw SettingError("clip", fmt::format("encodes {} (or {}): give it too", setting_reference("image"),
                                           setting_reference("ref_image")));
  for (const auto& [path, setting] : {std::pair{&r.control_video, "control_video"}, {&r.ref_image, "ref_image"}})
    if (!path->empty() && r.vae.empty())
      throw SettingError(setting,
                         fmt::format("needs {} (the encoder that makes its latents)", setting_reference("vae")));
  if (!r.src_mask.empty() && r.src_video.empty())
    throw SettingError("src_mask",
                       fmt::format("marks what to remake in {}: give the video too", setting_reference("src_video")));
  if (!std::isfinite(r.vace_scale)) throw SettingError("vace_scale", "must be a finite number");
  if (r.max_area != 0 && r.max_area < 256) throw SettingError("max_area", "must be at least 256 pixels (16x16)");
  if (r.fps < 0) throw SettingError("fps", "must be positive (0: the release's)");
  for (const auto& [setting, path] : {std::pair{"weights", r.weights},
                                      {"checkpoint", r.checkpoint},
                                      {"high_noise", r.high_noise},
                                      {"low_noise", r.low_noise},
                                      {"t5", r.t5},
                                      {"vae", r.vae},
                                      {"image", r.image},
                                      {"last_image", r.last_image},
                                      {"control_video", r.control_video},
                                      {"ref_image", r.ref_image},
                                      {"clip", r.clip},
                                      {"noise", r.noise}}) {
    if (path.empty()) continue;
    const std::string name = setting;
    const bool model_weights = name == "weights" || name == "high_noise" || name == "low_noise";
    if (model_weights && find_transformer_folder(path)) continue;  // a diffusers folder
    if (name == "vae" && vae_folder(path)) continue;
    if (name == "t5" && text_encoder_folder(path)) continue;
    if (name == "clip" && image_encoder_folder(path)) continue;
    if (const auto why = unreadable_file_reason(path); !why.empty())
      throw SettingError(setting, fmt::format("{}: {}", path, why));
  }
  if (r.steps && *r.steps < 1) throw SettingError("steps", "must be at least 1");
  if (r.shift && !(*r.shift > 0)) throw SettingError("shift", "must be positive");
  if (r.compare && r.data.empty())
    throw SettingError("compare", fmt::format("needs {} (the sample to compare with)", setting_reference("data")));
  if (!r.lora_scales.empty() && r.lora_scales.size() != 1 && r.lora_scales.size() != r.loras.size())
    throw SettingError("lora_scale", fmt::format("give one value, or one per {} ({} given for {} files)",
                                                 setting_reference("lora"), r.lora_scales.size(), r.loras.size()));
}

// The model, its weights' headers and the split. Each weights file's header is checked against the config before
// anything large is read or built: a 1.3B file for a 14B config is one line here, not a 57 GB model built first.
void SamplingPipeline::resolve_model() {
  auto& r = request_;
  experts_ = !r.high_noise.empty();
  cfg_low_ = r.cfg.empty() ? 5.0 : r.cfg.front();
  cfg_high_ = r.cfg.empty() ? 5.0 : r.cfg.back();
  const int branches = r.cfg_parallel ? 2 : 1;  // rank groups, one per branch of guidance
  if (r.sp == 0) r.sp = world_.size() / branches;
  if (r.cfg_parallel && world_.size() % 2 != 0)
    throw SettingError(
        "cfg_parallel",
        fmt::format("the two branches of guidance take half the ranks each: this job has {}", world_.size()));
  if (r.sp * branches != world_.size())
    throw SettingError(
        "sp", world_.size() == 1
                  ? fmt::format("{0}: the sample runs as one process: start it with mpirun -np {0}", r.sp)
                  : fmt::format("{}: this job has {} ranks: the sample is split over {} (give {} {} or leave it out)",
                                r.sp, world_.size(), r.cfg_parallel ? "half of them, one half a branch" : "all of them",
                                setting_reference("sp"), world_.size() / branches));
  if (r.shard_weights && world_.size() == 1)
    throw SettingError("shard_weights", "shards the weights over the ranks of mpirun -np N; this is one process");
  if (r.shard_weights && (!r.loras.empty() || !r.loras_high.empty() || !r.loras_low.empty()))
    throw SettingError("shard_weights",
                       "a LoRA is merged into whole weights: merge it first (wantrain export --merge) and sample "
                       "the merged weights");
  if (r.shard_weights && r.weights_dtype == at::kFloat8_e4m3fn)
    throw SettingError("shard_weights", fmt::format("not with {} fp8 (the slices are gathered in bf16 or fp32)",
                                                    setting_reference("weights_dtype")));
  if (r.shard_weights && r.offload_experts)
    throw SettingError("shard_weights", fmt::format("not with {} (each rank holds its slices of both)",
                                                    setting_reference("offload_experts")));
  config_ = sampling_model_config(r);
  if (config_.num_heads % r.sp != 0)
    throw SettingError("sp", fmt::format("{}: the model's {} attention heads do not divide by it (Ulysses gives "
                                         "each rank whole heads)",
                                         r.sp, config_.num_heads));
  for (const auto& path : {r.weights, r.high_noise, r.low_noise})
    if (!path.empty() && !sources_.count(path)) {
      auto source = open_weights(path);
      check_weights_fit(source, config_);
      sources_.emplace(path, std::move(source));
    }
  // Wan2.1's VAE or Wan2.2's, from the VAE's tensors, its config, or
  // without either the one whose latents the model makes (48 channels:
  // Wan2.2's), which sets the video's size per latent.
  vae_config_ = video_vae_config(r.vae, r.vae_config);
  if (r.vae.empty() && r.vae_config.empty() && config_.out_dim == Vae22Config{}.z_dim)
    vae_config_.version = VaeVersion::Wan22;
  if (!r.vae.empty() && vae_config_.z_dim() != config_.out_dim)
    throw SettingError("vae", fmt::format("{} is the {}, whose latents have {} channels; the model ({}) makes {}: "
                                          "give the VAE its data were encoded with (Wan2.2 TI2V-5B: Wan2.2_VAE.pth, "
                                          "the others: Wan2.1_VAE.pth)",
                                          r.vae, vae_config_.description(), vae_config_.z_dim(),
                                          r.model_config.empty() ? r.checkpoint : r.model_config, config_.out_dim));
  offload_ = experts_ && r.offload_experts && device_.type() != c10::kCPU;
  if (r.offload_experts && !offload_)
    report_warning("{}: sampling on the CPU, both experts are in host memory anyway",
                   setting_reference("offload_experts"));
}

// The settings a release fixes, where the request leaves them; the
// unconditional branch.
void SamplingPipeline::resolve_settings() {
  auto& r = request_;
  // A few-step student samples as it was trained, in what the options leave open.
  const auto student = student_sampler(r);
  if (student) {
    std::vector<std::string> given;  // the options that override the student's own
    if (r.solver) given.push_back(setting_reference("solver") + " " + solver_name(*r.solver));
    if (r.steps) given.push_back(fmt::format("{} {}", setting_reference("steps"), *r.steps));
    if (r.shift) given.push_back(fmt::format("{} {:g}", setting_reference("shift"), *r.shift));
    if (!r.cfg.empty()) given.push_back(setting_reference("cfg") + " " + cfg_text(cfg_low_, cfg_high_));
    if (!r.solver) r.solver = student->solver;
    if (!r.steps) r.steps = student->steps;
    if (!r.shift) r.shift = student->shift;
    if (r.cfg.empty()) {
      r.cfg = {1.0};
      cfg_low_ = cfg_high_ = 1.0;
    }
    report_info("a few-step student: {}, cfg 1, as it was trained{}", describe(*student),
                given.empty()
                    ? fmt::format(" ({}, {}, {} and {} override each)", setting_reference("solver"),
                                  setting_reference("steps"), setting_reference("shift"), setting_reference("cfg"))
                    : fmt::format("; sampled with {} instead", fmt::join(given, ", ")));
  }
  if (!r.shift && !r.checkpoint.empty())
    if (const auto shift = run_shift(r.checkpoint)) {
      r.shift = *shift;
      run_shift_ = true;
      report_info("shift {:g}, the run's ({} overrides it)", *shift, setting_reference("shift"));
    }
  // The defaults of the video: the release's of this VAE's models.
  const auto release = release_video(vae_config_);
  if (r.max_area == 0) r.max_area = release.width * release.height;
  if (r.fps == 0) r.fps = release.fps;
  const int64_t pixels = r.size && !r.prompt.empty() ? (*r.size)[0] * (*r.size)[1] : r.max_area;
  release_ = release_sampling(config_, experts_, pixels);
  if (release_ && !student) {  // a student of a released model samples as it was trained
    if (!r.steps) r.steps = release_->steps;
    if (!r.shift) r.shift = release_->shift;
    if (r.cfg.empty()) cfg_low_ = release_->cfg_low, cfg_high_ = release_->cfg_high;
    if (!r.solver && release_->solver) r.solver = *release_->solver;
    report_info("{}'s release settings: {}{} steps, shift {:g}, cfg {}{} (each option overrides its own)",
                release_->model, release_->solver ? solver_name(*r.solver) + std::string(", ") : std::string(),
                *r.steps, *r.shift, cfg_text(cfg_low_, cfg_high_),
                release_->boundary > 0 ? fmt::format(", boundary {:g}", release_->boundary) : "");
  }
  if (!r.solver) r.solver = Solver::UniPC;
  if (r.schedule == Schedule::Diffusers && *r.solver != Solver::UniPC)
    throw SettingError("schedule", fmt::format("diffusers is UniPC's schedule (WanPipeline's scheduler): give {} unipc",
                                               setting_reference("solver")));
  if (!r.steps) r.steps = 50;
  if (!r.shift) r.shift = 5.0;
  if (r.cfg_parallel && (cfg_low_ == 0 || cfg_low_ == 1 || cfg_high_ == 0 || cfg_high_ == 1))
    throw SettingError("cfg_parallel", fmt::format("needs guidance with both branches ({} other than 0 and 1)",
                                                   setting_reference("cfg")));
  // A released model's weights are bf16 as released: the blocks' Linears
  // are held so, half the memory of fp32.
  block_linear_dtype_ = r.weights_dtype.value_or(release_ ? at::kBFloat16 : at::kFloat);
  if (!r.prompt.empty()) {
    const auto branch = unconditional_branch(r.negative_prompt, release_, !r.checkpoint.empty());
    negative_prompt_ = branch.negative_prompt;
    report_info("unconditional branch: {}", branch.why);
  }
  boundary_ = r.boundary > 0 ? r.boundary : release_boundary(config_.model_type);
  const char* model_type = model_type_name(config_.model_type);
  const std::string model_named = r.model_config.empty() ? r.checkpoint : r.model_config;
  const bool ti2v = config_.model_type == ModelType::TI2V;
  if (!r.image.empty() && !config_.image_conditioned() && !ti2v)
    throw SettingError("image",
                       fmt::format("the model ({}) is {}: it starts from no picture", model_named, model_type));
  if (!r.last_image.empty() && config_.model_type != ModelType::FLF2V)
    throw SettingError("last_image", fmt::format("the model is {}, not flf2v", model_type));
  if (config_.model_type == ModelType::FLF2V && !r.image.empty() && r.last_image.empty())
    throw SettingError("last_image", "a flf2v model needs the last frame too");
  if ((!r.image.empty() || !r.ref_image.empty()) && config_.image_branch() && r.clip.empty())
    throw SettingError("clip", fmt::format("the {} model reads the picture's CLIP features: give the CLIP encoder "
                                           "(models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth)",
                                           model_type));
  if (!r.control_video.empty() && !config_.fun_control())
    throw SettingError(
        "control_video",
        fmt::format("the model ({}) is {} with in_dim {}: not a Fun-Control model (i2v with in_dim 3 x "
                    "out_dim = {}, or Wan2.2-Fun's {}){}",
                    model_named, model_type, config_.in_dim, 3 * config_.out_dim, 3 * config_.out_dim + 4,
                    config_.vace() ? "; a VACE model's control is " + setting_reference("src_video") : std::string()));
  if (!r.ref_image.empty() && !config_.ref_conv)
    throw SettingError(
        "ref_image",
        fmt::format("the model ({}) has no ref_conv: a reference picture is for a "
                    "Fun-Control V1.1 model (add_ref_conv){}",
                    model_named,
                    config_.vace() ? "; a VACE model's are " + setting_reference("src_ref_images") : std::string()));
  if (config_.fun_control() && r.vae.empty() && (gives_fun_control(r) || r.data.empty()))
    throw SettingError("vae", fmt::format("the Fun-Control model reads its control and pictures through the VAE: give "
                                          "{}",
                                          setting_reference("vae")));
  if (r.first_frame && (!ti2v || r.data.empty()))
    throw SettingError(
        "first_frame",
        fmt::format("a ti2v model's, with {} (this model is {}{})", setting_reference("data"), model_type,
                    r.data.empty() ? ", and no " + setting_reference("data") + " is given" : ""));
  if (!r.clip.empty() && !config_.image_branch())
    throw SettingError("clip", "the model has no CLIP branch (Wan2.2's I2V reads none)");
  const bool control = gives_vace_control(r) || r.vace_scale != 1.0;
  if (control && !config_.vace())
    throw SettingError(!r.src_video.empty()        ? "src_video"
                       : !r.src_ref_images.empty() ? "src_ref_images"
                                                   : "vace_scale",
                       fmt::format("the model ({}) is {}: it has no VACE blocks", model_named, model_type));
  if (config_.vace() && r.vae.empty() && (gives_vace_control(r) || r.data.empty()))
    throw SettingError(
        "vae", fmt::format("the VACE model reads its control through the VAE: give {}", setting_reference("vae")));
  if (config_.vace() && !r.vae.empty() &&
      2 * vae_config_.z_dim() + vae_config_.spatial_factor() * vae_config_.spatial_factor() != config_.vace_in_dim)
    throw SettingError(
        "vae", fmt::format("the VACE model reads {} channels of context, and this VAE makes {} (twice "
                           "its {} latent channels, and {} of the mask)",
                           config_.vace_in_dim,
                           2 * vae_config_.z_dim() + vae_config_.spatial_factor() * vae_config_.spatial_factor(),
                           vae_config_.z_dim(), vae_config_.spatial_factor() * vae_config_.spatial_factor()));
  if (config_.image_conditioned() && !config_.fun_control() && r.image.empty() && r.data.empty())
    throw SettingError(
        "image",
        fmt::format("the {} model starts from a picture: give {} FILE{}", model_type, setting_reference("image"),
                    config_.image_branch() ? " and " + setting_reference("clip") + " FILE" : std::string()));
}

// The step cache and the calibrations it needs, each model's.
void SamplingPipeline::resolve_step_cache() {
  const auto& r = request_;
  const auto method = r.cache.method;
  const bool calibrated = method == CacheMethod::TeaCache || method == CacheMethod::MagCache;
  if (!r.cache_calibration.empty() && !calibrated)
    throw SettingError("cache_calibration", fmt::format("{} {} takes no calibration (teacache and magcache do)",
                                                        setting_reference("cache"), cache_method_name(method)));
  if (method == CacheMethod::None) return;
  std::shared_ptr<const CacheCalibration> low, high;
  if (calibrated && experts_) {
    high = find_calibration(method, r.cache_calibration, cache_home_, config_, "high_noise", r.loras_high);
    low = find_calibration(method, r.cache_calibration, cache_home_, config_, "low_noise", r.loras_low);
  } else if (calibrated) {
    low = find_calibration(method, r.cache_calibration, cache_home_, config_, "model", r.loras);
  }
  caching_ = std::make_unique<StepCaching>(r.cache, low, high);
  report_info("step cache: {}", caching_->describe(*r.steps));
}

// The sample's shape, and what can be read before any model: a dataset
// sample, a row of text embeddings.
void SamplingPipeline::resolve_condition() {
  const auto& r = request_;
  condition_ = std::make_unique<Condition>();
  auto& c = *condition_;
  const int64_t latent_channels = config_.in_dim - config_.condition_channels();
  const std::string model_named = r.model_config.empty() ? r.checkpoint : r.model_config;
  if (!r.data.empty()) {
    const auto dataset = data::Dataset::open(r.data);
    if (r.index < 0 || r.index >= dataset.size())
      throw SettingError("index", fmt::format("{} is outside the {} samples of {}", r.index, dataset.size(), r.data));
    const auto& s = dataset.shape_of(r.index);  // a bucketed dataset: that sample's shape
    check_data_fits_model(s, r.data, config_, model_named);
    auto sample = read_dataset_sample(dataset, r.index);
    c.reference = sample.latents;
    if (r.compare) {
      if (const auto videos = videos_of_prompt(dataset, r.index); videos.size() > 1) {
        c.prompt_samples = videos;
        for (const auto i : videos) c.prompt_videos.push_back(read_dataset_sample(dataset, i).latents);
      }
    }
    c.context = sample.context;
    c.text_len = sample.text_len;
    c.image = shown_condition(sample.image, config_);  // the sample's own: its first (and last) frame, as trained
    shape_ = {1, latent_channels, s.frames, s.height, s.width};
    c.source = fmt::format("{} sample {}{}", r.data, r.index, sample.prompt.empty() ? "" : ": " + sample.prompt);
    if (config_.image_conditioned() && !c.image.y.defined())
      throw SettingError(
          "data", fmt::format("{} holds no image condition /y for the {} model: encode it with wandata encode "
                              "--condition{}, or {}",
                              r.data, config_.fun_control() ? "Fun-Control" : model_type_name(config_.model_type),
                              config_.fun_control() ? " fun-control" : "",
                              config_.fun_control() ? "sample from " + setting_reference("prompt") + " with " +
                                                          setting_reference("control_video")
                                                    : "give " + setting_reference("image")));
  } else if (!r.prompt.empty()) {
    const auto release = release_video(vae_config_);
    std::array<int64_t, 2> wh{release.width, release.height};
    if (r.size) {
      wh = *r.size;
    } else if (!r.image.empty() && !config_.fun_control()) {  // the picture's aspect ratio within max_area
      const auto picture = read_picture(r.image);
      // Wan2.2 TI2V's best_output_size, else image2video.py's rule; sides
      // multiples of the VAE's stride times the 2x2 patches.
      const int64_t multiple = 2 * vae_config_.spatial_factor();
      const auto size = config_.model_type == ModelType::TI2V
                            ? ti2v_video_size(picture.size(1), picture.size(2), r.max_area, multiple)
                            : image_video_size(picture.size(1), picture.size(2), r.max_area, multiple);
      wh = {size.width, size.height};
    }
    const int64_t frames = r.frames > 0 ? r.frames : release.frames, spatial = vae_config_.spatial_factor(),
                  temporal = vae_config_.temporal_factor();
    if ((frames - 1) % temporal || wh[0] % (2 * spatial) || wh[1] % (2 * spatial))
      throw SettingError(
          SettingNames{"frames", "size"},
          fmt::format("{} and {}x{}: with {}, video frames are {}k + 1 and the size multiples of {} "
                      "(the VAE's {}, then the DiT's 2x2 patches)",
                      frames, wh[0], wh[1], setting_reference("prompt"), temporal, 2 * spatial, spatial));
    shape_ = {1, latent_channels, 1 + (frames - 1) / temporal, wh[1] / spatial, wh[0] / spatial};
    c.source = fmt::format("prompt \"{}\"", r.prompt);
  } else {
    if (r.frames < 1 || !r.size)
      throw SettingError(SettingNames{"frames", "size"}, fmt::format("needed with {}", setting_reference("text")));
    auto text = data::read_text_condition(r.text, r.index);
    c.context = text.embedding;
    c.text_len = text.length;
    shape_ = {1, latent_channels, r.frames, (*r.size)[0], (*r.size)[1]};
    c.source = fmt::format("{} row {}", r.text, r.index);
    check_context_fits(c.context, config_, r.text, "text", model_named);
  }
}

// The VAE's tiles, for the sample's frame: with auto, tiles when the whole
// frame's decode does not fit the device beside the VAE's weights (the DiT
// is freed before the decode).
void SamplingPipeline::resolve_vae_tiling() {
  const auto& r = request_;
  if (r.vae.empty()) return;
  const int64_t s = vae_config_.spatial_factor(), width = shape_[4] * s, height = shape_[3] * s;
  double mine = 0;
  world_.agree([&] { mine = memory_beside_vae(device_, r.vae, r.vae_dtype); });
  // The least any rank has: every rank that encodes a picture tiles alike.
  double available = std::numeric_limits<double>::infinity();
  for (const auto& text :
       world_.all_gather(fmt::format("{:.17g}", mine), "all_gather (each rank's memory for the VAE)"))
    available = std::min(available, std::stod(text));
  world_.agree([&] { resolve_tiles(available, width, height); });
}

void SamplingPipeline::resolve_tiles(double available, int64_t width, int64_t height) {
  const auto& r = request_;
  vae_tiling_ = decode_tiling(r.vae_tiling, vae_config_, r.vae_dtype, width, height, available, "vae_tiling");
  if (vae_tiling_ && r.vae_tiling.mode == VaeTilingChoice::Mode::Auto)
    report_info(
        "VAE: {} ({} auto: decoding the whole {}x{} frame takes about {}, more than the {}'s {} beside the "
        "VAE)",
        vae_tiling_->describe(), setting_reference("vae_tiling"), width, height,
        format_bytes(vae_decode_bytes(vae_config_.version, r.vae_dtype, width, height)),
        device_.is_cuda() ? "device" : "host", format_bytes(available));
  else if (vae_tiling_)
    report_info("VAE: {}", vae_tiling_->describe());
}

// What it will hold, before the weights load.
void SamplingPipeline::report_memory() const {
  ActivationSettings step;
  step.latents = {shape_[2], shape_[3], shape_[4]};
  step.compute_dtype = request_.compute_dtype;
  step.attention_chunk = request_.attention_chunk;
  const auto memory = plan_sampling(config_, step, experts_ ? 2 : 1, offload_, block_linear_dtype_);
  report_info(
      "memory: {} of {} ({} weights), a forward {} ({}); at once on the {}: {}{}",
      experts_ ? "two experts" : "the model", format_bytes(memory.expert_bytes),
      block_linear_dtype_ == at::kFloat ? "fp32" : train::precision_name(block_linear_dtype_) + std::string(" block"),
      format_bytes(memory.forward_bytes), describe_attention(request_.attention_chunk, memory.attention_chunk),
      device_.is_cuda() ? "device" : "host", format_bytes(memory.device_bytes()),
      memory.host_bytes() > 0
          ? fmt::format(" (one expert; the other, {}, in host memory)", format_bytes(memory.host_bytes()))
      : request_.shard_weights
          ? fmt::format(" (the weights sharded: about {} of them a rank)",
                        format_bytes(memory.expert_bytes * (experts_ ? 2 : 1) / double(world_.size())))
          : std::string());
}

SamplingPlan SamplingPipeline::plan() const {
  const auto& r = request_;
  // The encoders' weights from their files' headers, in the dtype each computes in.
  auto weight_bytes = [](const std::string& path, at::ScalarType dtype, const std::string& only = "") {
    return path.empty() ? 0.0 : weights_bytes(path, dtype, only);
  };
  SamplingJob job;
  job.config = config_;
  job.step.latents = {shape_[2], shape_[3], shape_[4]};
  job.step.compute_dtype = r.compute_dtype;
  job.step.attention_chunk = r.attention_chunk;
  job.step.sequence_parallel = r.sp;
  job.experts = experts_ ? 2 : 1;
  job.block_linear_dtype = block_linear_dtype_;
  job.ranks = world_.size();
  job.shard_weights = r.shard_weights;
  job.t5_bytes = r.prompt.empty() ? 0.0 : weight_bytes(t5_weights_file(r.t5), r.t5_dtype);
  job.clip_bytes = weight_bytes(r.clip, r.clip_dtype, "visual");  // the image tower of open-clip's file
  if (job.clip_bytes == 0) job.clip_bytes = weight_bytes(r.clip, r.clip_dtype);
  job.vae_bytes = weight_bytes(vae_weights_file(r.vae), r.vae_dtype);
  job.picture = !r.image.empty() || (config_.fun_control() && gives_fun_control(r));
  if (!r.vae.empty()) {
    const int64_t s = vae_config_.spatial_factor();
    job.decode_bytes = vae_tiling_
                           ? vae_tiled_decode_bytes(vae_config_.version, r.vae_dtype, *vae_tiling_, shape_[4] * s,
                                                    shape_[3] * s, vae_config_.temporal_factor() * (shape_[2] - 1) + 1)
                           : vae_decode_bytes(vae_config_.version, r.vae_dtype, shape_[4] * s, shape_[3] * s);
    job.decode_tiled = vae_tiling_.has_value();
  }
  return plan_sampling_job(job);
}

// The models of a sample and what they are run with, destroyed together
// (the groups after the models whose forwards use them).
struct SamplingPipeline::Models {
  // The ranks' communicator (NCCL on GPUs, else MPI); with sequence
  // parallelism the token group, with cfg_parallel the branch pair.
  std::unique_ptr<distributed::Comm> comm, sequence_group, branch_pair;
  std::vector<std::unique_ptr<ShardedBlocks>> shards;  // live as long as the models' forwards
  WanModel net{nullptr}, high_net{nullptr};
  int branch = 0;  // 0: conditional (or both, without cfg_parallel)
};

void SamplingPipeline::encode_prompt() {
  const auto& r = request_;
  auto& c = *condition_;
  // The VAE encodes the picture before sampling (on every rank), then
  // decodes the sample (on rank 0, which writes it).
  // A VACE model's control is encoded on every rank (a --data sample brings its own context).
  const bool encodes_control = (config_.vace() && (gives_vace_control(r) || !c.image.vace_context.defined())) ||
                               (config_.fun_control() && (gives_fun_control(r) || !c.image.y.defined()));
  if (!r.vae.empty() && (world_.is_root() || !r.image.empty() || encodes_control)) {
    c.vae = open_video_vae(r.vae, vae_config_, r.vae_dtype);
    c.vae->set_tiling(vae_tiling_);
    c.vae->to(device_);
    c.vae->eval();
  }
  if (r.prompt.empty()) return;
  // umT5 on rank 0 alone; the other ranks receive its embeddings.
  std::vector<std::string> prompts{r.prompt};
  if (!negative_prompt_.empty()) prompts.push_back(negative_prompt_);
  const auto encoded =
      encode_on_root(world_, {r.t5, r.t5_config, r.tokenizer, r.t5_dtype, config_.text_len}, device_, prompts);
  if (encoded.truncated > 0) report_warning("the prompt is cut at {} tokens (the model's text_len)", config_.text_len);
  c.context = encoded.embedding[0];
  c.text_len = encoded.lengths[0];
  if (!negative_prompt_.empty()) c.negative = encoded.embedding[1];
  world_.agree([&] {  // every rank has the embeddings: one line for the job
    check_context_fits(c.context, config_, r.t5, "t5", r.model_config.empty() ? r.checkpoint : r.model_config);
  });
}

std::unique_ptr<SamplingPipeline::Models> SamplingPipeline::load_models() {
  const auto& r = request_;
  auto models = std::make_unique<Models>();
  // The communicator before the models: with shard_weights each rank's
  // slices are read into it.
  if (world_.size() > 1) models->comm = distributed::make_comm(world_, distributed::Backend::Auto);
  auto load_into = [&](WanModelImpl& model, const TensorSource& source) {
    if (!r.shard_weights) {
      const auto report = load_weights(model, source);
      return report.summary() + (report.diffusers_names ? ", diffusers names" : "");
    }
    check_weights_fit(source, config_);
    models->shards.push_back(std::make_unique<ShardedBlocks>(*models->comm, model, source, device_));
    return fmt::format("sharded over {} ranks: {} of weights a rank", world_.size(),
                       format_bytes(double(models->shards.back()->held_bytes())));
  };
  // One model, or A14B's two experts of the same config, each from its
  // recipe: every parameter read from the weights (checked above, so none
  // is drawn first), then its LoRA files merged.
  auto recipe_of = [&](const std::string& weights, bool prefer_ema, const std::vector<std::string>& loras) {
    ModelRecipe recipe;
    recipe.config = config_;
    recipe.linear_dtype = block_linear_dtype_;
    recipe.first = FirstWeights::None;
    recipe.weights = ModelWeights{weights, prefer_ema};
    for (size_t i = 0; i < loras.size(); ++i)
      recipe.merged_loras.push_back(
          {loras[i], r.lora_scales.empty() ? 1.0 : r.lora_scales[r.lora_scales.size() == 1 ? 0 : i]});
    recipe.attention_chunk = r.attention_chunk;
    return recipe;
  };
  auto build = [&](const ModelRecipe& recipe, const TensorSource& source, const std::string& role,
                   const std::string& merged_into) {
    auto built = build_model(recipe, {&source, load_into});
    report_info("{}{})", role, built.loaded);
    for (size_t i = 0; i < recipe.merged_loras.size(); ++i)
      report_info("LoRA {} merged{} at scale {:g} ({} layers)", recipe.merged_loras[i].path, merged_into,
                  recipe.merged_loras[i].scale, built.merged_layers[i]);
    return built.model;
  };
  auto load_model = [&](const std::string& weights, const std::vector<std::string>& loras, const char* role,
                        const char* merged_into) {
    return build(recipe_of(weights, false, loras), sources_.at(weights),
                 fmt::format("{}{} ({:.3g} parameters, ", role, weights, double(parameter_count(config_))),
                 merged_into);
  };
  if (experts_) {
    models->high_net = load_model(r.high_noise, r.loras_high, "high-noise expert ", " into the high-noise expert");
    models->net = load_model(r.low_noise, r.loras_low, "low-noise expert ", " into the low-noise expert");
  } else if (r.checkpoint.empty()) {
    models->net = load_model(r.weights, r.loras, "", "");
  } else {
    const bool prefer_ema = r.checkpoint_weights != CheckpointWeightsChoice::Model;
    const auto saved = checkpoint_weights(r.checkpoint, prefer_ema);
    if (r.checkpoint_weights == CheckpointWeightsChoice::Ema && !saved.ema)
      throw SettingError("checkpoint_weights",
                         fmt::format("checkpoint {} holds no EMA weights (its run had no --ema-decay); use auto or "
                                     "model",
                                     r.checkpoint));
    models->net = build(recipe_of(r.checkpoint, prefer_ema, r.loras), saved.source,
                        fmt::format("{} ({:.3g} parameters, {} weights of step {}, ", r.checkpoint,
                                    double(parameter_count(config_)), saved.ema ? "EMA" : "model", saved.step),
                        "");
  }
  for (auto* model : {&models->net, &models->high_net}) {
    if (!*model) continue;
    (*model)->to(offload_ ? c10::Device(c10::kCPU) : device_);
    (*model)->eval();
  }
  return models;
}

// The ranks' groups: with cfg_parallel the first half computes the
// conditional branch and the second half the unconditional one, rank r of
// one half paired with rank r of the other; within a half, the tokens'
// all-to-all.
void SamplingPipeline::split_ranks(Models& models) const {
  const auto& r = request_;
  models.branch = world_.rank() / r.sp;
  if (r.sp > 1) {
    models.sequence_group = r.cfg_parallel ? models.comm->split(models.branch) : std::move(models.comm);
    for (auto* model : {&models.net, &models.high_net})
      if (*model) (*model)->set_sequence_parallel(models.sequence_group.get());
    report_info(
        "{} ranks split each sample's {} tokens (Ulysses, {} heads a rank)", r.sp,
        shape_[2] / config_.patch_size[0] * (shape_[3] / config_.patch_size[1]) * (shape_[4] / config_.patch_size[2]),
        config_.num_heads / r.sp);
  }
  if (r.cfg_parallel) {
    models.branch_pair = (models.comm ? models.comm : models.sequence_group)->split(world_.rank() % r.sp);
    report_info("the two branches of guidance side by side, {} rank{} each", r.sp, r.sp == 1 ? "" : "s");
  }
  if (experts_)
    report_info("two experts, the high-noise one from t = {:g} (boundary {:g}), cfg {:g} low / {:g} high{}",
                1000 * boundary_, boundary_, cfg_low_, cfg_high_, offload_ ? ", the idle one in host memory" : "");
}

// The picture: an image-to-video model's condition, or TI2V's first frame
// (returned; undefined without one).
at::Tensor SamplingPipeline::start_from_image() {
  const auto& r = request_;
  auto& c = *condition_;
  at::Tensor first_frame;
  if (config_.fun_control()) {  // the start picture is part of the control
    if (gives_fun_control(r) || !c.image.y.defined()) start_from_fun_control();
    // Wan2.2-Fun-5B-Control holds a given start's latents as TI2V holds its picture's.
    if (config_.holds_start_frame() && c.image.y.defined() && start_given(c.image.y, config_.out_dim)[0])
      first_frame = start_latents(c.image.y, config_.out_dim);
    return first_frame;
  }
  if (!r.image.empty()) {
    const auto first = read_picture(r.image);
    const auto last = r.last_image.empty() ? at::Tensor() : read_picture(r.last_image);
    ClipVision clip(nullptr);
    if (!r.clip.empty()) clip = load_clip_vision(r.clip, r.clip_dtype, device_);
    const auto start =
        start_from_picture(config_, *c.vae, clip.is_empty() ? nullptr : clip.get(), first, last, shape_, device_);
    const int64_t spatial = vae_config_.spatial_factor();
    if (config_.image_conditioned()) {
      c.image = start.image;
      report_info("starting from {}{} at {}x{}{}", r.image, last.defined() ? " to " + r.last_image : std::string(),
                  shape_[4] * spatial, shape_[3] * spatial,
                  !clip.is_empty() ? " (VAE and CLIP), CLIP weights in " + clip->weights_layout() : " (VAE)");
    } else {
      first_frame = start.first_frame;
      report_info("starting from {} at {}x{} (its latents are the first frame)", r.image, shape_[4] * spatial,
                  shape_[3] * spatial);
    }
    if (!world_.is_root()) c.vae.reset();  // rank 0 alone decodes
  }
  if (r.first_frame) first_frame = c.reference.slice(1, 0, 1).unsqueeze(0);  // [1, C, 1, H, W]
  return first_frame;
}

// The sample's video: its pixel frames, height and width.
std::array<int64_t, 3> SamplingPipeline::sample_pixels() const {
  const int64_t s = vae_config_.spatial_factor();
  return {1 + (shape_[2] - 1) * vae_config_.temporal_factor(), shape_[3] * s, shape_[4] * s};
}

// A VACE model's context: the control video, its mask and the reference
// pictures at the sample's size, through the VAE (on every rank).
at::Tensor SamplingPipeline::start_from_control() {
  const auto& r = request_;
  auto& c = *condition_;
  const auto [frames, height, width] = sample_pixels();
  VaceSource source;
  if (!r.src_video.empty()) source.video = read_control_video(r.src_video, frames, height, width);
  if (!r.src_mask.empty()) source.mask = mask_of_video(read_control_video(r.src_mask, frames, height, width));
  for (const auto& path : r.src_ref_images)
    source.references.push_back(fit_reference(read_picture(path), height, width));
  auto context = vace_context(*c.vae, source, frames, height, width).unsqueeze(0).to(device_);
  report_info("VACE control at {}x{}, {} frames: {}, {}, {} reference picture{}; context [{}], scale {:g}", width,
              height, frames, r.src_video.empty() ? "no video (grey)" : r.src_video,
              r.src_mask.empty() ? "every pixel made" : "mask " + r.src_mask, source.references.size(),
              source.references.size() == 1 ? "" : "s", fmt::join(context.sizes().slice(1), ","), r.vace_scale);
  if (!world_.is_root()) c.vae.reset();  // rank 0 alone decodes
  return context;
}

// A Fun-Control model's condition: the control video, the start and the
// reference pictures at the sample's size, through the VAE and CLIP (on
// every rank).
void SamplingPipeline::start_from_fun_control() {
  const auto& r = request_;
  auto& c = *condition_;
  const auto [frames, height, width] = sample_pixels();
  // The control video scaled to cover the sample and cut around the
  // centre; the pictures as they are (resized for the VAE, not for CLIP).
  FunControlSource source;
  if (!r.control_video.empty()) source.control = read_control_video(r.control_video, frames, height, width);
  if (!r.image.empty()) source.start = read_picture(r.image);
  if (!r.ref_image.empty()) source.reference = read_picture(r.ref_image);
  ClipVision clip(nullptr);
  if (!r.clip.empty()) clip = load_clip_vision(r.clip, r.clip_dtype, device_);
  c.image = fun_control_condition(config_, *c.vae, clip.is_empty() ? nullptr : clip.get(), source, frames, height,
                                  width, device_);
  const std::string clip_of = !r.ref_image.empty() ? r.ref_image
                              : !r.image.empty()   ? r.image
                                                   : std::string("no picture (zeros)");
  report_info("Fun-Control{} at {}x{}, {} frames: control {}, start picture {}{}{}",
              config_.holds_start_frame() && source.start.defined()
                  ? " (Wan2.2-Fun-5B: with the start's mask, its latents held as frame 0)"
              : config_.fun_control_with_mask() ? " (Wan2.2-Fun: with the start's mask)"
                                                : "",
              width, height, frames, r.control_video.empty() ? "none (zeros)" : r.control_video,
              r.image.empty() ? "none" : r.image,
              config_.ref_conv
                  ? ", reference picture " + (r.ref_image.empty() ? std::string("none (zeros)") : r.ref_image)
                  : std::string(),
              config_.image_branch() ? "; CLIP features of " + clip_of : std::string());
  if (!world_.is_root()) c.vae.reset();  // rank 0 alone decodes
}

at::Tensor SamplingPipeline::sample(StepCaching* caching) {
  const auto& r = request_;
  auto& c = *condition_;
  encode_prompt();
  const auto models = load_models();
  split_ranks(*models);
  auto& net = models->net;
  auto& high_net = models->high_net;
  SampleCondition condition;
  condition.first_frame = start_from_image();
  condition.context = c.context;
  condition.negative = c.negative;  // undefined: what --text-drop trains
  condition.image = c.image;
  // A VACE model's control: the one given, else a --data sample's own context.
  if (config_.vace() && (gives_vace_control(r) || !c.image.vace_context.defined()))
    condition.image.vace_context = start_from_control();
  condition.image.vace_scale = r.vace_scale;
  SampleModels sample_models;
  sample_models.model = net.get();
  if (experts_) {
    sample_models.high = HighNoiseModel{high_net.get(), boundary_};
    sample_models.high_cfg = cfg_high_;
  }
  sample_models.pair = {models->branch_pair.get(), models->branch};
  sample_models.caching = caching ? caching : caching_.get();
  // With offload_experts one expert at a time on the device, moved at the
  // switch (text2video.py's offload).
  WanModelImpl* on_device = offload_ ? nullptr : net.get();
  if (offload_)
    sample_models.before = [&](WanModelImpl& wanted) {
      if (on_device == &wanted) return;
      for (auto* other : {&net, &high_net})
        if (other->get() != &wanted) (*other)->to(c10::kCPU);
      wanted.to(device_);
      on_device = &wanted;
    };
  SamplerOptions sampler;
  sampler.solver = *r.solver;
  sampler.schedule = r.schedule;
  sampler.steps = *r.steps;
  sampler.shift = *r.shift;
  sampler.cfg = cfg_low_;
  // A VACE model draws the reference pictures' latent frames first, and drops them after.
  const auto& vace = condition.image.vace_context;
  const int64_t references = vace.defined() ? vace.size(2) - shape_[2] : 0;
  const std::vector<int64_t> drawn{shape_[0], shape_[1], references + shape_[2], shape_[3], shape_[4]};
  const auto noise =
      (r.noise.empty() ? seeded_noise(drawn, r.seed)
                       : data::read_noise(r.noise, {drawn[1], drawn[2], drawn[3], drawn[4]}).unsqueeze(0))
          .to(device_);  // [1, C, F, H, W]
  const CacheCounts before = caching_ ? caching_->counts() : CacheCounts{};
  auto latents =
      drop_reference_frames(draw_latents(sample_models, condition, sampler, noise, r.compute_dtype), references);
  if (caching_ && !caching) {
    const auto& after = caching_->counts();
    const int64_t ran = after.ran - before.ran, skipped = after.skipped - before.skipped;
    report_info("step cache: {} of {} model evaluations ran, {} skipped ({:.2f}x fewer)", ran, ran + skipped, skipped,
                ran > 0 ? double(ran + skipped) / double(ran) : 0.0);
  }
  return latents;
  // The models, their shards and the groups go here: the DiT's memory is
  // free before write() decodes.
}

void SamplingPipeline::write(const at::Tensor& latents) {
  if (!world_.is_root()) return;
  const auto& r = request_;
  const auto& c = *condition_;
  data::SampleShape out_shape;
  out_shape.channels = shape_[1];
  out_shape.frames = shape_[2];
  out_shape.height = shape_[3];
  out_shape.width = shape_[4];
  out_shape.text_len = c.context.size(0);
  out_shape.text_dim = c.context.size(1);
  {
    data::ShardWriter writer(r.out, out_shape, 1, /*with_prompt=*/true);
    writer.write(0, latents, c.context, c.text_len,
                 fmt::format("wansample of {} ({}{} steps {}, shift {}, cfg {}, seed {})", c.source,
                             solver_name(*r.solver), r.schedule == Schedule::Diffusers ? " (diffusers' schedule)" : "",
                             *r.steps, *r.shift, cfg_text(cfg_low_, cfg_high_), r.seed));
    writer.close();
  }
  report_info("wrote latents {} to {}", out_shape.latents_string(), r.out);
  if (r.compare) {
    const auto m = compare_latents(latents, c.reference);
    report_info("against {} sample {}: correlation {:.3f}, MSE {:.4f} (the reference's variance {:.4f})", r.data,
                r.index, m.correlation, m.mse, m.reference_variance);
    if (!c.prompt_videos.empty()) {
      const auto v = compare_with_videos(latents, c.prompt_videos);
      report_info(
          "its prompt's {} videos in {}: the nearest (sample {}) correlation {:.3f}; their mean correlation {:.3f}",
          c.prompt_videos.size(), r.data, c.prompt_samples[v.nearest], v.nearest_correlation, v.mean_correlation);
    }
  }
  if (!r.png.empty()) {
    PreviewPng preview(r.png);
    preview.write({latents, c.reference});
    report_info("wrote preview {} (channels {}{})", r.png, fmt::join(preview.preview().channels, ", "),
                c.reference.defined() ? "; the sample above the dataset's own latents" : "");
  }
  if (!r.video.empty() || !r.frames_dir.empty()) {
    media::VideoWriterOptions writer;
    writer.fps = r.fps;
    DecodedVideo decoded(*c.vae, {r.video, r.frames_dir, writer, {}});
    decoded.write({latents, {}});
    const int64_t frames = decoded.frames();
    report_info("decoded {} frames of {}x{} to {}{}{}", frames, latents.size(3) * vae_config_.spatial_factor(),
                latents.size(2) * vae_config_.spatial_factor(), r.video,
                !r.video.empty() && !r.frames_dir.empty() ? " and " : "", r.frames_dir);
  }
}

}  // namespace wt::wan
