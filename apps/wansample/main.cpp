// wansample: generate latents with a WanModel by UniPC, DPM++ or Euler
// sampling with classifier-free guidance, conditioned on a prompt (umT5), a dataset
// sample's text embedding or an HDF5 file of embeddings. Writes the latents
// as a one-sample shard (docs/data-format.md), with --png a preview image,
// and with --vae a video (--video) or PNG frames (--frames-dir). An
// image-to-video model starts from a picture (--image, encoded by the VAE
// and CLIP as Wan's image2video.py does) or a dataset sample's condition.
// On one process, or on N ranks (mpirun -np N wansample) that split each
// sample's tokens with Ulysses sequence parallelism, as training's --sp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/data/noise_file.hpp"
#include "wantrain/data/text_file.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/app/app.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/objective/caption_dropout.hpp"
#include "wantrain/wan/run/checkpoint_weights.hpp"
#include "wantrain/wan/run/data_fits_model.hpp"
#include "wantrain/wan/sample/latent_comparison.hpp"
#include "wantrain/wan/sample/latent_preview.hpp"
#include "wantrain/wan/run/memory_plan.hpp"
#include "wantrain/wan/sample/dataset_sample.hpp"
#include "wantrain/wan/sample/model_velocity.hpp"
#include "wantrain/wan/sample/picture_start.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/sample/sampling_plan.hpp"
#include "wantrain/wan/sample/sharded_blocks.hpp"
#include "wantrain/wan/encoders/text_encoder.hpp"
#include "wantrain/wan/encode/image_condition.hpp"
#include "wantrain/wan/vae/decode_memory.hpp"
#include "wantrain/wan/vae/release_video.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/wan/sample/video_output.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/app/device_option.hpp"
#include "wantrain/app/version.hpp"

namespace wt {
namespace {

struct SampleConfig {
  std::string config_file, weights, checkpoint,
      checkpoint_weights = "auto", model_config, data, text, size, out = "sample.h5", png, precision = "fp32",
      device = "auto", prompt, negative_prompt, t5, t5_config, t5_dtype = "bf16", tokenizer, noise, vae, vae_config,
      vae_dtype = "fp32", video, frames_dir, image, last_image, clip, clip_dtype = "fp32", cfg = "5", high_noise,
      low_noise, attention_chunk = "fused", solver = "unipc", weights_dtype = "auto";
  int64_t index = 0, frames = 0, max_area = 0;  // 0: the VAE's release (wan/vae/release_video.hpp)
  int steps = 50, threads = 0, sp = 0;          // sp 0: the ranks of the job
  double shift = 5.0, fps = 0, boundary = 0;    // fps 0: the VAE's release
  uint64_t seed = 0;
  bool compare = false, offload_experts = false, first_frame = false, cfg_parallel = false, shard_weights = false,
       dry_run = false;
  std::vector<std::string> loras, lora_scales, loras_high, loras_low;
};

// The model config: --model-config, or the one --checkpoint stores (checked
// against --model-config when both are given).
wan::WanConfig sampling_model_config(const SampleConfig& c) {
  if (c.checkpoint.empty()) return wan::load_model_config(c.model_config);
  const std::string stored = ckpt::read_model_config(c.checkpoint);
  if (!c.model_config.empty())
    ckpt::check_model_config(stored, c.checkpoint, wan::to_json(wan::load_model_config(c.model_config)),
                             "--model-config " + c.model_config);
  return wan::parse_model_config(stored, fmt::format("checkpoint {}: attribute model_config", c.checkpoint));
}

int run(distributed::World& world, int argc, char** argv) {
  set_option_names({{"device", "device"},
                    {"max_area", "max-area"},
                    {"image", "image"}});  // the library's settings that errors may name
  SampleConfig c;
  OptionSet options(
      "wansample",
      "(--weights FILE --model-config JSON | --checkpoint PATH) (--prompt TEXT | --data DIR | --text FILE) "
      "[--vae FILE --video OUT.mp4] [options]");
  options.group("wansample")
      .standard_options(&c.config_file)
      .add("weights", &c.weights,
           "model weights: .safetensors, .safetensors.index.json or a torch.save .pth (Wan or diffusers names)")
      .add("high-noise", &c.high_noise,
           "Wan2.2 A14B: the high-noise expert's weights (high_noise_model), for the steps at or above --boundary; "
           "with --low-noise instead of --weights")
      .add("low-noise", &c.low_noise, "Wan2.2 A14B: the low-noise expert's weights (low_noise_model), for the rest")
      .add("boundary", &c.boundary,
           "with two experts: the timestep / 1000 from which the high-noise expert samples (default the release's: "
           "0.875 text to video, 0.9 image to video)")
      .flag("offload-experts", &c.offload_experts,
            "with two experts on a GPU: keep the idle expert in host memory, so one is on the device at a time")
      .add("checkpoint", &c.checkpoint,
           "a wantrain checkpoint (e.g. runs/a/latest) instead of --weights: its weights and its stored model config")
      .choice("checkpoint-weights", &c.checkpoint_weights, {"auto", "ema", "model"},
              "which weights of --checkpoint: auto (the EMA when the run kept one), ema or model")
      .add("model-config", &c.model_config,
           "model config JSON (data/configs/*.json); with --checkpoint, optional and checked against the stored one")
      .add("prompt", &c.prompt,
           "condition on this prompt, encoded by umT5 (--t5, --tokenizer); shape from --size, --frames")
      .add("negative-prompt", &c.negative_prompt,
           "with --prompt: the unconditional branch of guidance (default: a released model's negative prompt, "
           "the all-zero context that --text-drop trains for a wantrain checkpoint or a model of no released "
           "shape; '' gives the all-zero context)")
      .add("t5", &c.t5, "umT5 weights for --prompt: models_t5_umt5-xxl-enc-bf16.pth or UMT5EncoderModel safetensors")
      .add("t5-config", &c.t5_config, "umT5 shape as JSON (the official constructor's keys); default umT5-XXL")
      .choice("t5-dtype", &c.t5_dtype, {"bf16", "fp32"}, "umT5 weights and compute (the release is bf16)")
      .add("tokenizer", &c.tokenizer, "umT5's spiece.model, or the folder holding it")
      .add("data", &c.data, "condition on the text embedding of a dataset sample (shape from the dataset)")
      .add("text", &c.text, "condition on an HDF5 file of embeddings: /text_emb [N,L,D] or [L,D], optional /text_len")
      .add("index", &c.index, "which sample of --data or row of --text")
      .add("frames", &c.frames,
           "with --prompt: video frames, 4k + 1 (default the release's: 81 with Wan2.1's VAE, 121 with Wan2.2's "
           "TI2V-5B); with --text: latent frames")
      .add("size", &c.size,
           "with --prompt: video WIDTHxHEIGHT (default the release's: 832x480 with Wan2.1's VAE, 1280x704 with "
           "Wan2.2's); with --text: latent HxW")
      .add("noise", &c.noise,
           "start from this noise instead of the seed's: an HDF5 /noise of [C, F, H, W] latents (to follow "
           "another implementation step for step)")
      .choice("solver", &c.solver, {"unipc", "dpm++", "euler"},
              "the sampler: unipc (the release's default), dpm++ (DPM-Solver++ 2M) or euler, each as Wan's "
              "schedulers step (docs/model.md, \"Solvers\")")
      .add("steps", &c.steps, "solver steps (default: the release's for a released model, else 50)")
      .add("shift", &c.shift, "sigma shift s: s*sigma/(1+(s-1)*sigma); with --checkpoint the run's unless given")
      .add("cfg", &c.cfg,
           "classifier-free guidance scale against the unconditional (all-zero) context that wantrain --text-drop "
           "trains; 1: no guidance, 0: unconditional. With two experts LOW,HIGH: the low-noise expert's, then the "
           "high-noise one's (A14B: 3,4 text to video, 3.5,3.5 image to video)")
      .add("seed", &c.seed, "seed of the initial noise")
      .choice("precision", &c.precision, {"fp32", "bf16"}, "matrix products in fp32 or bf16 (autocast)")
      .choice("weights-dtype", &c.weights_dtype, {"auto", "bf16", "fp32"},
              "the blocks' Linears held in bf16 or fp32 (norms, modulation, embeddings and head stay fp32); auto: "
              "bf16 for a released model, fp32 for others")
      .add("attention-chunk", &c.attention_chunk,
           "fused: the fused kernel (scaled_dot_product_attention); Q: attention over Q queries at a time; both "
           "take memory linear in the token count; 0: the whole score matrix; auto: the whole matrix while its "
           "scores fit 1 GiB per block, else the chunk whose scores do (as wantrain's)")
      .add("device", &c.device,
           "auto (the first CUDA device when LibTorch sees one, else the CPU), cpu, cuda or cuda:N; the noise is "
           "drawn on the CPU, so every device samples from the same start")
      .add("threads", &c.threads, "CPU threads (0: LibTorch's default)")
      .add("sp", &c.sp,
           "under mpirun: the ranks that split each sample's tokens (Ulysses sequence parallelism, as wantrain "
           "--sp); 0: all of them (half with --cfg-parallel). The model's heads must divide by it")
      .flag("cfg-parallel", &c.cfg_parallel,
            "under mpirun with an even number of ranks: the conditional and the unconditional branch of guidance "
            "each on half of them, side by side")
      .flag("shard-weights", &c.shard_weights,
            "under mpirun: each rank keeps 1/N of the blocks' weights and gathers each block for its forward (as "
            "the official --dit_fsdp), for a model that does not fit one rank whole; the same sample")
      .flag("dry-run", &c.dry_run,
            "check everything and print the memory plan of each rank (the encoders, the DiT and its forward, the "
            "VAE's decode), then stop before any weights are read")
      .add("out", &c.out, "output: the latents as a one-sample shard")
      .add("image", &c.image,
           "image-to-video models: start from this picture (PNG, JPEG, ...), encoded by --vae (and --clip) as Wan's "
           "image2video.py does; the video takes its aspect ratio within --max-area unless --size is given")
      .add("last-image", &c.last_image, "flf2v models: the last frame, as --image is the first")
      .flag("first-frame", &c.first_frame,
            "ti2v models with --data: start from the sample's own first latent frame, held as --image holds the "
            "picture's")
      .add("clip", &c.clip,
           "CLIP image encoder for --image with Wan2.1 I2V/FLF2V "
           "(models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth or safetensors of its names, or ComfyUI's "
           "clip_vision_h.safetensors)")
      .choice("clip-dtype", &c.clip_dtype, {"fp32", "bf16"}, "CLIP weights and compute")
      .add("max-area", &c.max_area,
           "with --image: the video's pixels (default the release size's: 832x480 with Wan2.1's VAE, 1280x704 with "
           "Wan2.2's)")
      .add("vae", &c.vae,
           "decode the sample with this VAE, Wan2.1's or Wan2.2's (told apart by their tensors): Wan2.1_VAE.pth, "
           "Wan2.2_VAE.pth, ComfyUI's or diffusers' weights")
      .add("vae-config", &c.vae_config,
           "VAE shape as JSON (the official constructor's keys); default the released shape of the VAE --vae holds")
      .choice("vae-dtype", &c.vae_dtype, {"fp32", "bf16"}, "VAE weights and compute")
      .add("video", &c.video, "with --vae: write the video here (.mp4: H.264; .mkv, .webm, .gif, .mov too)")
      .add("frames-dir", &c.frames_dir, "with --vae: write the frames as PNGs into this folder")
      .add("fps", &c.fps, "the video's frame rate (default the release's: 16 with Wan2.1's VAE, 24 with Wan2.2's)")
      .add("png", &c.png,
           "also write a PNG preview (the 4 channels that vary most, one row of frames each; under it the dataset's "
           "own sample)")
      .flag("compare", &c.compare,
            "print the correlation and MSE of the sample against the --data sample's own latents")
      .repeated("lora", &c.loras,
                "a LoRA file to apply (repeatable): wantrain/ComfyUI (diffusion_model.*), diffusers (transformer.*) "
                "or kohya (lora_unet_*) layout")
      .repeated("lora-scale", &c.lora_scales, "the strength of each --lora, in order (one value: all; default 1)")
      .repeated("lora-high", &c.loras_high, "with two experts: a LoRA file for the high-noise expert (repeatable)")
      .repeated("lora-low", &c.loras_low, "with two experts: a LoRA file for the low-noise expert (repeatable)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  const bool experts = !c.high_noise.empty() || !c.low_noise.empty();
  if (experts && (c.high_noise.empty() || c.low_noise.empty()))
    throw UsageError(
        "options --high-noise, --low-noise: give both experts (Wan2.2 A14B's high_noise_model and "
        "low_noise_model)");
  if (experts && (!c.weights.empty() || !c.checkpoint.empty()))
    throw UsageError("options --high-noise, --low-noise: they replace --weights and --checkpoint");
  if (!experts && c.weights.empty() == c.checkpoint.empty())
    throw UsageError("options --weights, --checkpoint: give exactly one (the model weights to sample with)");
  if (!experts && (!c.loras_high.empty() || !c.loras_low.empty() || c.offload_experts || c.boundary != 0))
    throw UsageError(
        "options --lora-high, --lora-low, --offload-experts, --boundary: need two experts "
        "(--high-noise and --low-noise)");
  if (experts && !c.loras.empty())
    throw UsageError("option --lora: with two experts, give each its own with --lora-high and --lora-low");
  if (c.boundary != 0 && !(c.boundary > 0 && c.boundary <= 1))
    throw UsageError("option --boundary: must be in (0, 1] (a timestep / 1000)");
  // --cfg X, or LOW,HIGH with two experts (the official order).
  std::vector<double> cfg;
  for (const auto& text : split_list(c.cfg)) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(value >= 0) || !std::isfinite(value))
      throw UsageError(fmt::format("option --cfg: '{}' is not a guidance scale of 0 or more", text));
    cfg.push_back(value);
  }
  if (cfg.empty() || cfg.size() > 2 || (cfg.size() == 2 && !experts))
    throw UsageError(fmt::format("option --cfg: '{}': give one scale{}", c.cfg,
                                 experts ? ", or LOW,HIGH (one per expert)" : " (LOW,HIGH needs two experts)"));
  double cfg_low = cfg[0], cfg_high = cfg.back();
  // Which of the settings that a release fixes were given (else the release's, below).
  std::map<std::string, bool> given;
  for (const auto& option : options.resolved()) given[option.name] = option.source != "default";
  // With --checkpoint and no --shift, the run's: the shift it trained at is
  // the one its model samples well at (docs/training.md, "What good training
  // looks like").
  bool run_shift = false;
  for (const auto& option : options.resolved())
    if (option.name == "shift" && option.source == "default" && !c.checkpoint.empty()) {
      std::string stored;
      try {
        stored = ckpt::read_run_options(c.checkpoint);
      } catch (const UsageError&) {  // none stored, or not readable: the latter is reported below
      }
      const auto run = nlohmann::json::parse(stored, nullptr, false);
      if (run.is_object() && run.contains("shift") && run["shift"].is_string()) {
        char* end = nullptr;
        const std::string text = run["shift"].get<std::string>();
        const double value = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0' && value > 0) {
          c.shift = value;
          run_shift = true;
        }
      }
    }
  if (run_shift) std::cout << fmt::format("wansample: shift {:g}, the run's (--shift overrides it)\n", c.shift);
  if (c.checkpoint.empty() && c.model_config.empty())
    throw UsageError(fmt::format("option --model-config: the model config is required with {}",
                                 experts ? "--high-noise and --low-noise" : "--weights"));
  if (int(!c.data.empty()) + int(!c.text.empty()) + int(!c.prompt.empty()) != 1)
    throw UsageError("options --prompt, --data, --text: give exactly one (what the sample is conditioned on)");
  if (!c.prompt.empty() && (c.t5.empty() || c.tokenizer.empty()))
    throw UsageError("options --t5, --tokenizer: needed with --prompt (the umT5 weights and its spiece.model)");
  if (!c.negative_prompt.empty() && c.prompt.empty()) throw UsageError("option --negative-prompt: needs --prompt");
  if ((!c.video.empty() || !c.frames_dir.empty()) && c.vae.empty())
    throw UsageError("options --video, --frames-dir: need --vae (the decoder that makes pixels of the latents)");
  if (!c.vae.empty() && c.video.empty() && c.frames_dir.empty() && c.image.empty())
    throw UsageError("option --vae: give --video or --frames-dir (where the decoded frames go)");
  if (!c.image.empty() && c.vae.empty())
    throw UsageError("option --image: needs --vae (the encoder that makes the picture's latents)");
  if (!c.image.empty() && c.prompt.empty() && c.text.empty())
    throw UsageError("option --image: with --prompt or --text (--data samples bring their own condition)");
  if (!c.last_image.empty() && c.image.empty()) throw UsageError("option --last-image: needs --image");
  if (!c.clip.empty() && c.image.empty()) throw UsageError("option --clip: encodes --image: give it too");
  if (c.max_area != 0 && c.max_area < 256) throw UsageError("option --max-area: must be at least 256 pixels (16x16)");
  if (c.fps < 0) throw UsageError("option --fps: must be positive (0: the release's)");
  for (const auto& [option, path] : {std::pair{"weights", c.weights},
                                     {"checkpoint", c.checkpoint},
                                     {"high-noise", c.high_noise},
                                     {"low-noise", c.low_noise},
                                     {"t5", c.t5},
                                     {"vae", c.vae},
                                     {"image", c.image},
                                     {"last-image", c.last_image},
                                     {"clip", c.clip},
                                     {"noise", c.noise}})
    if (const auto why = path.empty() ? std::string() : unreadable_file_reason(path); !why.empty())
      throw UsageError(fmt::format("option --{}: {}: {}", option, path, why));
  if (c.steps < 1) throw UsageError("option --steps: must be at least 1");
  const int64_t attention_chunk = app::parse_attention_chunk(c.attention_chunk);
  if (c.shift <= 0) throw UsageError("option --shift: must be positive");
  if (c.compare && c.data.empty()) throw UsageError("option --compare: needs --data (the sample to compare with)");
  if (c.threads > 0) torch::set_num_threads(c.threads);
  // Every rank runs the same pipeline on the same inputs (the noise is the
  // seed's, drawn on the CPU); the model splits the tokens over the ranks,
  // and rank 0 alone writes and prints.
  const int branches = c.cfg_parallel ? 2 : 1;  // rank groups, one per branch of guidance
  if (c.sp == 0) c.sp = world.size() / branches;
  if (!world.is_root()) std::cout.setstate(std::ios::badbit);  // one rank's lines, not N copies
  auto chosen = distributed::choose_device(app::parse_device(c.device), "device");
  if (world.size() > 1 && chosen.device.is_cuda() && (c.device == "auto" || c.device == "cuda"))  // a GPU a rank
    chosen.device = torch::Device(torch::kCUDA, world.local_rank() % torch::cuda::device_count());
  if (!chosen.warning.empty()) std::cerr << "wansample: warning: " << chosen.warning << "\n";
  const torch::Device device = chosen.device;
  if (!c.lora_scales.empty() && c.lora_scales.size() != 1 && c.lora_scales.size() != c.loras.size())
    throw UsageError(fmt::format("option --lora-scale: give one value, or one per --lora ({} given for {} files)",
                                 c.lora_scales.size(), c.loras.size()));
  std::vector<double> scales;
  for (const auto& text : c.lora_scales) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value))
      throw UsageError(fmt::format("option --lora-scale: '{}' is not a number", text));
    scales.push_back(value);
  }

  // The model, its weights' headers and the split, checked on every rank
  // alike: a mistake is one line for the job, not one a rank. Each weights
  // file's header is checked against the config before anything large is
  // read or built: a 1.3B file for a 14B config is one line here, not a
  // 57 GB model built first.
  wan::WanConfig config;
  std::map<std::string, wan::TensorSource> sources;
  world.agree([&] {
    if (c.cfg_parallel && (world.size() % 2 != 0 || cfg_low == 0 || cfg_low == 1 || cfg_high == 0 || cfg_high == 1))
      throw UsageError(fmt::format(
          "option --cfg-parallel: {}",
          world.size() % 2 != 0
              ? fmt::format("the two branches of guidance take half the ranks each: this job has {}", world.size())
              : "needs guidance with both branches (--cfg other than 0 and 1)"));
    if (c.sp * branches != world.size())
      throw UsageError(
          world.size() == 1
              ? fmt::format("option --sp: {0}: wansample runs as one process: start it with mpirun -np {0}", c.sp)
              : fmt::format("option --sp: {}: this job has {} ranks: wansample splits each sample over {} "
                            "(give --sp {} or leave it out)",
                            c.sp, world.size(), c.cfg_parallel ? "half of them, one half a branch" : "all of them",
                            world.size() / branches));
    if (c.shard_weights && world.size() == 1)
      throw UsageError(
          "option --shard-weights: shards the weights over the ranks of mpirun -np N; this is one process");
    if (c.shard_weights && (!c.loras.empty() || !c.loras_high.empty() || !c.loras_low.empty()))
      throw UsageError(
          "option --shard-weights: a LoRA is merged into whole weights: merge it first (wantrain export --merge) and "
          "sample the merged weights");
    if (c.shard_weights && c.offload_experts)
      throw UsageError("option --shard-weights: not with --offload-experts (each rank holds its slices of both)");
    config = sampling_model_config(c);
    if (config.num_heads % c.sp != 0)
      throw UsageError(
          fmt::format("option --sp: {}: the model's {} attention heads do not divide by it (Ulysses gives "
                      "each rank whole heads)",
                      c.sp, config.num_heads));
    for (const auto& path : {c.weights, c.high_noise, c.low_noise})
      if (!path.empty() && !sources.count(path)) {
        auto source = wan::open_weights(path);
        wan::check_weights_fit(source, config);
        sources.emplace(path, std::move(source));
      }
  });
  // Wan2.1's VAE or Wan2.2's, from --vae's tensors, --vae-config, or
  // without either the one whose latents the model makes (48 channels:
  // Wan2.2's), which sets the video's size per latent.
  wan::VideoVaeConfig vae_config = wan::video_vae_config(c.vae, c.vae_config);
  if (c.vae.empty() && c.vae_config.empty() && config.out_dim == wan::Vae22Config{}.z_dim)
    vae_config.version = wan::VaeVersion::Wan22;
  // The defaults of the video: the release's of this VAE's models.
  const auto release = wan::release_video(vae_config);
  if (c.max_area == 0) c.max_area = release.width * release.height;
  if (c.fps == 0) c.fps = release.fps;
  // A released model samples with its release's settings unless given.
  int64_t pixels = c.max_area;
  if (!c.size.empty() && !c.prompt.empty()) {
    const auto wh = parse_sizes(c.size, "WIDTHxHEIGHT", release.size_text().c_str(), "size");
    pixels = wh[0] * wh[1];
  }
  const auto release_settings = wan::release_sampling(config, experts, pixels);
  if (release_settings) {
    if (!given["steps"]) c.steps = release_settings->steps;
    if (!given["shift"] && !run_shift) c.shift = release_settings->shift;
    if (!given["cfg"]) cfg_low = release_settings->cfg_low, cfg_high = release_settings->cfg_high;
    std::cout << fmt::format(
        "wansample: {}'s release settings: {} steps, shift {:g}, cfg {}{} (each option overrides its own)\n",
        release_settings->model, c.steps, c.shift,
        cfg_low == cfg_high ? fmt::format("{:g}", cfg_low) : fmt::format("{:g},{:g}", cfg_low, cfg_high),
        release_settings->boundary > 0 ? fmt::format(", boundary {:g}", release_settings->boundary) : "");
  }
  // A released model's weights are bf16 as released: the blocks' Linears
  // are held so, half the memory of fp32.
  const bool bf16_weights = c.weights_dtype == "bf16" || (c.weights_dtype == "auto" && release_settings);
  const at::ScalarType block_linear_dtype = bf16_weights ? at::kBFloat16 : at::kFloat;
  // The unconditional branch with --prompt (wan/sample/release_defaults.hpp).
  std::string negative_prompt;
  if (!c.prompt.empty()) {
    const auto branch = wan::unconditional_branch(
        given["negative-prompt"] ? std::optional<std::string>(c.negative_prompt) : std::nullopt, release_settings,
        !c.checkpoint.empty());
    negative_prompt = branch.negative_prompt;
    std::cout << "wansample: unconditional branch: " << branch.why << "\n";
  }
  const char* model_type = wan::model_type_name(config.model_type);
  const bool ti2v = config.model_type == wan::ModelType::TI2V;
  if (!c.image.empty() && !config.image_conditioned() && !ti2v)
    throw UsageError(fmt::format("option --image: the model ({}) is {}: it starts from no picture",
                                 c.model_config.empty() ? c.checkpoint : c.model_config, model_type));
  if (!c.last_image.empty() && config.model_type != wan::ModelType::FLF2V)
    throw UsageError(fmt::format("option --last-image: the model is {}, not flf2v", model_type));
  if (config.model_type == wan::ModelType::FLF2V && !c.image.empty() && c.last_image.empty())
    throw UsageError("option --last-image: a flf2v model needs the last frame too");
  if (!c.image.empty() && config.image_branch() && c.clip.empty())
    throw UsageError(
        fmt::format("option --clip: the {} model reads the picture's CLIP features: give the CLIP "
                    "encoder (models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth)",
                    model_type));
  if (c.first_frame && (!ti2v || c.data.empty()))
    throw UsageError(fmt::format("option --first-frame: a ti2v model's, with --data (this model is {}{})", model_type,
                                 c.data.empty() ? ", and no --data is given" : ""));
  if (!c.clip.empty() && !config.image_branch())
    throw UsageError("option --clip: the model has no CLIP branch (Wan2.2's I2V reads none)");
  if (config.image_conditioned() && c.image.empty() && c.data.empty())
    throw UsageError(fmt::format("option --image: the {} model starts from a picture: give --image FILE{}", model_type,
                                 config.image_branch() ? " and --clip FILE" : ""));
  // The VAE encodes the picture before sampling (on every rank), then
  // decodes the sample (on rank 0, which writes it).
  std::shared_ptr<wan::VideoVae> vae;
  if (!c.vae.empty()) {
    if (vae_config.z_dim() != config.out_dim)
      throw UsageError(
          fmt::format("option --vae: {} is the {}, whose latents have {} channels; the model ({}) makes "
                      "{}: give the VAE its data were encoded with (Wan2.2 TI2V-5B: Wan2.2_VAE.pth, "
                      "the others: Wan2.1_VAE.pth)",
                      c.vae, vae_config.description(), vae_config.z_dim(),
                      c.model_config.empty() ? c.checkpoint : c.model_config, config.out_dim));
    if (!c.dry_run && (world.is_root() || !c.image.empty())) {
      vae = wan::open_video_vae(c.vae, vae_config, app::float_dtype(c.vae_dtype));
      vae->to(device);
      vae->eval();
    }
  }
  const int64_t latent_channels = config.in_dim - config.condition_channels();
  wan::ImageCondition image;                // [1, ...] on the device, once the shape is known
  at::Tensor context, reference, negative;  // [L, D]; the dataset's latents [C, F, H, W]; --negative-prompt's [L, D]
  int32_t text_len = 0;
  std::string source;
  std::vector<int64_t> shape;  // [1, C, F, H, W]
  if (!c.data.empty()) {
    const auto dataset = data::Dataset::open(c.data);
    if (c.index < 0 || c.index >= dataset.size())
      throw UsageError(
          fmt::format("option --index: {} is outside the {} samples of {}", c.index, dataset.size(), c.data));
    const auto& s = dataset.shape_of(c.index);  // a bucketed dataset: that sample's shape
    wan::check_data_fits_model(s, c.data, config, c.model_config);
    auto sample = wan::read_dataset_sample(dataset, c.index);
    reference = sample.latents;
    context = sample.context;
    text_len = sample.text_len;
    image = sample.image;  // the sample's own condition: its first (and last) frame, as trained
    shape = {1, latent_channels, s.frames, s.height, s.width};
    source = fmt::format("{} sample {}{}", c.data, c.index, sample.prompt.empty() ? "" : ": " + sample.prompt);
  } else if (!c.prompt.empty()) {
    std::vector<int64_t> wh;
    if (!c.image.empty() && c.size.empty()) {  // the picture's aspect ratio within --max-area
      const auto picture = wan::read_picture(c.image);
      // Wan2.2 TI2V's best_output_size, else image2video.py's rule; sides
      // multiples of the VAE's stride times the 2x2 patches.
      const int64_t multiple = 2 * vae_config.spatial_factor();
      const auto size = ti2v ? wan::ti2v_video_size(picture.size(1), picture.size(2), c.max_area, multiple)
                             : wan::image_video_size(picture.size(1), picture.size(2), c.max_area, multiple);
      wh = {size.width, size.height};
    } else {
      const std::string release_size = release.size_text();
      wh = parse_sizes(c.size.empty() ? release_size : c.size, "WIDTHxHEIGHT", release_size.c_str(), "size");
    }
    const int64_t frames = c.frames > 0 ? c.frames : release.frames, spatial = vae_config.spatial_factor(),
                  temporal = vae_config.temporal_factor();
    if ((frames - 1) % temporal || wh[0] % (2 * spatial) || wh[1] % (2 * spatial))
      throw UsageError(
          fmt::format("options --frames {}, --size {}x{}: with --prompt, video frames are {}k + 1 and "
                      "the size multiples of {} (the VAE's {}, then the DiT's 2x2 patches)",
                      frames, wh[0], wh[1], temporal, 2 * spatial, spatial));
    // umT5 on rank 0 alone; the other ranks receive its embeddings.
    std::vector<std::string> prompts{c.prompt};
    if (!negative_prompt.empty()) prompts.push_back(negative_prompt);
    wan::TextEncoder::Encoded encoded;  // a dry run encodes nothing: one token of zeros
    if (c.dry_run)
      encoded = {torch::zeros({int64_t(prompts.size()), 1, config.text_dim}), std::vector<int32_t>(prompts.size(), 1),
                 0};
    else
      encoded = wan::encode_on_root(
          world, {c.t5, c.t5_config, c.tokenizer, app::float_dtype(c.t5_dtype), config.text_len}, device, prompts);
    if (encoded.truncated > 0 && world.is_root())
      std::cerr << fmt::format("wansample: warning: the prompt is cut at {} tokens (--text-len of the model)\n",
                               config.text_len);
    context = encoded.embedding[0];
    text_len = encoded.lengths[0];
    if (!negative_prompt.empty()) negative = encoded.embedding[1];
    shape = {1, latent_channels, 1 + (frames - 1) / temporal, wh[1] / spatial, wh[0] / spatial};
    source = fmt::format("prompt \"{}\"", c.prompt);
  } else {
    if (c.frames < 1 || c.size.empty()) throw UsageError("options --frames, --size: needed with --text");
    const auto [h, w] = parse_height_width(c.size, "size");
    auto text = data::read_text_condition(c.text, c.index);
    context = text.embedding;
    text_len = text.length;
    shape = {1, latent_channels, c.frames, h, w};
    source = fmt::format("{} row {}", c.text, c.index);
  }
  if (context.size(1) != config.text_dim || context.size(0) > config.text_len)
    throw UsageError(fmt::format("text embeddings [{}, {}] do not fit model config {} (text_len {}, text_dim {})",
                                 context.size(0), context.size(1), c.model_config, config.text_len, config.text_dim));

  // With --offload-experts the idle expert waits in host memory: one expert
  // on the device at a time, moved at the switch (text2video.py's offload).
  const bool offload = experts && c.offload_experts && device.type() != torch::kCPU;
  if (c.offload_experts && !offload)
    std::cerr << "wansample: warning: --offload-experts: sampling on the CPU, both experts are in host memory anyway\n";
  // What it will hold, before the weights load.
  {
    wan::ActivationSettings step;
    step.latents = {shape[2], shape[3], shape[4]};
    step.compute_dtype = app::float_dtype(c.precision);
    step.attention_chunk = attention_chunk;
    const auto memory = wan::plan_sampling(config, step, experts ? 2 : 1, offload, block_linear_dtype);
    std::cout << fmt::format("wansample: memory: {} of {} ({} weights), a forward {} ({}); at once on the {}: {}{}\n",
                             experts ? "two experts" : "the model", wan::format_bytes(memory.expert_bytes),
                             bf16_weights ? "bf16 block" : "fp32", wan::format_bytes(memory.forward_bytes),
                             wan::describe_attention(attention_chunk, memory.attention_chunk),
                             device.is_cuda() ? "device" : "host", wan::format_bytes(memory.device_bytes()),
                             memory.host_bytes() > 0 ? fmt::format(" (one expert; the other, {}, in host memory)",
                                                                   wan::format_bytes(memory.host_bytes()))
                             : c.shard_weights       ? fmt::format(" (the weights sharded: about {} of them a rank)",
                                                                   wan::format_bytes(memory.expert_bytes * (experts ? 2 : 1) /
                                                                                     double(world.size())))
                                                     : std::string())
              << std::flush;  // before a model that may not fit is built
  }
  if (c.dry_run) {
    // The encoders' weights from their files' headers, in the dtype each computes in.
    auto weight_bytes = [](const std::string& path, const std::string& dtype, const std::string& only = "") {
      return path.empty() ? 0.0 : wan::weights_bytes(path, app::float_dtype(dtype), only);
    };
    wan::SamplingJob job;
    job.config = config;
    job.step.latents = {shape[2], shape[3], shape[4]};
    job.step.compute_dtype = app::float_dtype(c.precision);
    job.step.attention_chunk = attention_chunk;
    job.step.sequence_parallel = c.sp;
    job.experts = experts ? 2 : 1;
    job.block_linear_dtype = block_linear_dtype;
    job.ranks = world.size();
    job.shard_weights = c.shard_weights;
    job.t5_bytes = c.prompt.empty() ? 0.0 : weight_bytes(c.t5, c.t5_dtype);
    job.clip_bytes = weight_bytes(c.clip, c.clip_dtype, "visual");  // the image tower of open-clip's file
    if (job.clip_bytes == 0) job.clip_bytes = weight_bytes(c.clip, c.clip_dtype);
    job.vae_bytes = weight_bytes(c.vae, c.vae_dtype);
    job.picture = !c.image.empty();
    if (!c.vae.empty())
      job.decode_bytes =
          wan::vae_decode_bytes(vae_config.version, app::float_dtype(c.vae_dtype),
                                shape[4] * vae_config.spatial_factor(), shape[3] * vae_config.spatial_factor());
    const auto plan = wan::plan_sampling_job(job);
    std::cout << fmt::format("wansample: dry run: what each rank holds{} (nothing was loaded)\n{}",
                             world.size() > 1 ? fmt::format(" on {} ranks", world.size()) : std::string(),
                             plan.table());
    return kExitOk;
  }
  // The ranks' communicator (NCCL on GPUs, else MPI), before the models:
  // with --shard-weights each rank's slices are read into it.
  std::unique_ptr<distributed::Comm> comm, sequence_group, branch_pair;
  if (world.size() > 1) comm = distributed::make_comm(world, distributed::Backend::Auto);
  std::vector<std::unique_ptr<wan::ShardedBlocks>> shards;  // live as long as the models' forwards
  auto load_into = [&](wan::WanModelImpl& model, const wan::TensorSource& source) {
    if (!c.shard_weights) {
      const auto report = wan::load_weights(model, source);
      return report.summary() + (report.diffusers_names ? ", diffusers names" : "");
    }
    wan::check_weights_fit(source, config);
    shards.push_back(std::make_unique<wan::ShardedBlocks>(*comm, model, source, device));
    return fmt::format("sharded over {} ranks: {} of weights a rank", world.size(),
                       wan::format_bytes(double(shards.back()->held_bytes())));
  };
  // One model, or A14B's two experts of the same config.
  // Every parameter is read from the weights (checked above), so none is drawn first.
  auto load_model = [&](const std::string& weights, const char* role) {
    wan::WanModel model(config, block_linear_dtype, wan::WanInit::Empty);
    const auto loaded = load_into(*model, sources.at(weights));
    std::cout << fmt::format("wansample: {}{} ({:.3g} parameters, {})\n", role, weights,
                             double(wan::parameter_count(config)), loaded);
    return model;
  };
  wan::WanModel net(nullptr), high_net(nullptr);
  if (experts) {
    high_net = load_model(c.high_noise, "high-noise expert ");
    net = load_model(c.low_noise, "low-noise expert ");
  } else if (c.checkpoint.empty()) {
    net = load_model(c.weights, "");
  } else {
    net = wan::WanModel(config, block_linear_dtype, wan::WanInit::Empty);
    const auto saved = wan::checkpoint_weights(c.checkpoint, c.checkpoint_weights != "model");
    if (c.checkpoint_weights == "ema" && !saved.ema)
      throw UsageError(
          fmt::format("option --checkpoint-weights: checkpoint {} holds no EMA weights (its run had no "
                      "--ema-decay); use auto or model",
                      c.checkpoint));
    const auto loaded = load_into(*net, saved.source);
    std::cout << fmt::format("wansample: {} ({:.3g} parameters, {} weights of step {}, {})\n", c.checkpoint,
                             double(wan::parameter_count(config)), saved.ema ? "EMA" : "model", saved.step, loaded);
  }
  auto merge_loras = [&](wan::WanModelImpl& model, const std::vector<std::string>& files, const char* role) {
    for (size_t i = 0; i < files.size(); ++i) {
      const double scale = scales.empty() ? 1.0 : scales[scales.size() == 1 ? 0 : i];
      const int layers = wan::merge_lora_file(model, files[i], scale);
      std::cout << fmt::format("wansample: LoRA {} merged{} at scale {:g} ({} layers)\n", files[i], role, scale,
                               layers);
    }
  };
  merge_loras(*net, experts ? c.loras_low : c.loras, experts ? " into the low-noise expert" : "");
  if (experts) merge_loras(*high_net, c.loras_high, " into the high-noise expert");
  for (auto* model : {&net, &high_net}) {
    if (!*model) continue;
    (*model)->to(offload ? torch::Device(torch::kCPU) : device);
    (*model)->eval();
    (*model)->set_attention_chunk(attention_chunk);
  }
  // The ranks' groups (NCCL on GPUs, else MPI): with --cfg-parallel the
  // first half computes the conditional branch and the second half the
  // unconditional one, rank r of one half paired with rank r of the other;
  // within a half, the tokens' all-to-all.
  const int branch = world.rank() / c.sp;  // 0: conditional (or both, without --cfg-parallel)
  if (c.sp > 1) {
    sequence_group = c.cfg_parallel ? comm->split(branch) : std::move(comm);
    for (auto* model : {&net, &high_net})
      if (*model) (*model)->set_sequence_parallel(sequence_group.get());
    std::cout << fmt::format(
        "wansample: {} ranks split each sample's {} tokens (Ulysses, {} heads a rank)\n", c.sp,
        shape[2] / config.patch_size[0] * (shape[3] / config.patch_size[1]) * (shape[4] / config.patch_size[2]),
        config.num_heads / c.sp);
  }
  if (c.cfg_parallel) {
    branch_pair = (comm ? comm : sequence_group)->split(world.rank() % c.sp);
    std::cout << fmt::format("wansample: the two branches of guidance side by side, {} rank{} each\n", c.sp,
                             c.sp == 1 ? "" : "s");
  }
  const double boundary =
      c.boundary > 0 ? c.boundary : (config.model_type == wan::ModelType::I2V ? 0.9 : 0.875);  // the release's
  if (experts)
    std::cout << fmt::format(
        "wansample: two experts, the high-noise one from t = {:g} (boundary {:g}), cfg {:g} "
        "low / {:g} high{}\n",
        1000 * boundary, boundary, cfg_low, cfg_high, offload ? ", the idle one in host memory" : "");

  // The picture: an image-to-video model's condition, or TI2V's first frame.
  at::Tensor first_frame;
  if (!c.image.empty()) {
    const auto first = wan::read_picture(c.image);
    const auto last = c.last_image.empty() ? at::Tensor() : wan::read_picture(c.last_image);
    wan::ClipVision clip(nullptr);
    if (!c.clip.empty()) clip = wan::load_clip_vision(c.clip, app::float_dtype(c.clip_dtype), device);
    const auto start =
        wan::start_from_picture(config, *vae, clip.is_empty() ? nullptr : clip.get(), first, last, shape, device);
    const int64_t spatial = vae_config.spatial_factor();
    if (config.image_conditioned()) {
      image = start.image;
      std::cout << fmt::format(
          "wansample: starting from {}{} at {}x{}{}\n", c.image, last.defined() ? " to " + c.last_image : std::string(),
          shape[4] * spatial, shape[3] * spatial,
          !clip.is_empty() ? " (VAE and CLIP), CLIP weights in " + clip->weights_layout() : " (VAE)");
    } else {
      first_frame = start.first_frame;
      std::cout << fmt::format("wansample: starting from {} at {}x{} (its latents are the first frame)\n", c.image,
                               shape[4] * spatial, shape[3] * spatial);
    }
  }
  if (c.first_frame) first_frame = reference.slice(1, 0, 1).unsqueeze(0);  // [1, C, 1, H, W]
  if (config.image_conditioned() && !image.y.defined())
    throw UsageError(
        fmt::format("option --data: {} holds no image condition /y for the {} model: encode it with "
                    "wandata encode --condition, or give --image",
                    c.data, model_type));
  if (image.y.defined()) image.y = image.y.to(device);
  if (image.clip_fea.defined()) image.clip_fea = image.clip_fea.to(device);
  const auto cond = context.unsqueeze(0).to(device);  // [1, L, D]
  const auto uncond = negative.defined() ? negative.unsqueeze(0).to(device)
                                         : wan::unconditional_context(cond);  // what --text-drop trains
  const nn::AutocastScope autocast(app::float_dtype(c.precision), device.type());
  // With --offload-experts one expert at a time on the device, moved at
  // the switch (text2video.py's offload).
  wan::WanModelImpl* on_device = offload ? nullptr : net.get();
  auto velocity_of = [&](wan::WanModel& model) {
    std::function<void()> bring;
    if (offload)
      bring = [&, wanted = model.get()] {
        if (on_device == wanted) return;
        for (auto* other : {&net, &high_net})
          if (other->get() != wanted) (*other)->to(torch::kCPU);
        wanted->to(device);
        on_device = wanted;
      };
    return wan::model_velocity(*model, cond, uncond, image, {branch_pair.get(), branch}, bring);
  };
  const wan::VelocityField velocity = velocity_of(net);
  std::optional<wan::HighNoiseExpert> high_expert;
  if (experts) high_expert = wan::HighNoiseExpert{velocity_of(high_net), cfg_high, boundary};
  wan::SamplerOptions sampler;
  sampler.solver = *wan::solver_from_name(c.solver);
  sampler.steps = c.steps;
  sampler.shift = c.shift;
  sampler.cfg = cfg_low;
  sampler.first_frame = first_frame.defined() ? first_frame.to(device, torch::kFloat32) : at::Tensor();
  sampler.patch = config.patch_size;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(c.seed);
  const auto noise =
      (c.noise.empty() ? torch::randn(shape, generator, torch::kFloat32)
                       : data::read_noise(c.noise, {shape[1], shape[2], shape[3], shape[4]}).unsqueeze(0))
          .to(device);  // [1, C, F, H, W]
  const auto latents =
      wan::sample_flow(noise, velocity, sampler, high_expert ? &*high_expert : nullptr)[0].to(torch::kCPU);
  if (!world.is_root()) return kExitOk;  // every rank holds the sample; rank 0 writes it
  // The DiT is done: its memory goes before the VAE decodes.
  net = wan::WanModel(nullptr);
  high_net = wan::WanModel(nullptr);
  shards.clear();

  data::SampleShape out_shape;
  out_shape.channels = shape[1];
  out_shape.frames = shape[2];
  out_shape.height = shape[3];
  out_shape.width = shape[4];
  out_shape.text_len = context.size(0);
  out_shape.text_dim = context.size(1);
  {
    data::ShardWriter writer(c.out, out_shape, 1, /*with_prompt=*/true);
    writer.write(
        0, latents, context, text_len,
        fmt::format("wansample of {} ({} steps {}, shift {}, cfg {}, seed {})", source, c.solver, c.steps, c.shift,
                    cfg_low == cfg_high ? fmt::format("{:g}", cfg_low) : fmt::format("{:g},{:g}", cfg_low, cfg_high),
                    c.seed));
    writer.close();
  }
  std::cout << fmt::format("wansample: wrote latents {} to {}\n", out_shape.latents_string(), c.out);
  if (c.compare) {
    const auto m = wan::compare_latents(latents, reference);
    std::cout << fmt::format(
        "wansample: against {} sample {}: correlation {:.3f}, MSE {:.4f} (the reference's variance {:.4f})\n", c.data,
        c.index, m.correlation, m.mse, m.reference_variance);
  }
  if (!c.png.empty()) {
    std::vector<at::Tensor> videos{latents};
    if (reference.defined()) videos.push_back(reference);
    const auto shown = wan::write_latent_preview(c.png, videos);
    std::cout << fmt::format("wansample: wrote preview {} (channels {}{})\n", c.png, fmt::join(shown, ", "),
                             reference.defined() ? "; the sample above the dataset's own latents" : "");
  }
  if (!c.video.empty() || !c.frames_dir.empty()) {
    media::VideoWriterOptions writer;
    writer.fps = c.fps;
    const int64_t frames = wan::write_decoded_video(*vae, latents, {c.video, c.frames_dir, writer, {}});
    std::cout << fmt::format("wansample: decoded {} frames of {}x{} to {}{}{}\n", frames,
                             latents.size(3) * vae_config.spatial_factor(),
                             latents.size(2) * vae_config.spatial_factor(), c.video,
                             !c.video.empty() && !c.frames_dir.empty() ? " and " : "", c.frames_dir);
  }
  return kExitOk;
}

}  // namespace
}  // namespace wt

int main(int argc, char** argv) { return wt::app::run_app(argc, argv, wt::run); }
