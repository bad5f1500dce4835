// wansample: generate latents with a WanModel by UniPC, DPM++ or Euler
// sampling with classifier-free guidance, conditioned on a prompt (umT5), a dataset
// sample's text embedding or an HDF5 file of embeddings. Writes the latents
// as a one-sample shard (docs/data-format.md), with --png a preview image,
// and with --vae a video (--video) or PNG frames (--frames-dir). An
// image-to-video model starts from a picture (--image, encoded by the VAE
// and CLIP as Wan's image2video.py does) or a dataset sample's condition.
// On one process, or on N ranks (mpirun -np N wansample) that split each
// sample's tokens with Ulysses sequence parallelism, as training's --sp.
// The pipeline is the library's (wan/sample/sampling_pipeline.hpp): this
// file declares the options and turns them into its typed request.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>

#include "wantrain/app/app.hpp"
#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/app/device_option.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/sample/sampling_pipeline.hpp"
#include "wantrain/wan/sample/step_cache_calibration.hpp"

namespace wt {
namespace {

struct SampleConfig {
  std::string config_file, weights, checkpoint,
      checkpoint_weights = "auto", model_config, data, text, size, out = "sample.h5", png, precision = "fp32",
      device = "auto", prompt, negative_prompt, t5, t5_config, t5_dtype = "bf16", tokenizer, noise, vae, vae_config,
      vae_dtype = "fp32", vae_tiling = "auto", video, frames_dir, image, last_image, clip, clip_dtype = "fp32",
      cfg = "5", high_noise, low_noise, attention_chunk = "fused", solver = "unipc", weights_dtype = "auto",
      schedule = "release", cache = "none", cache_calibration, calibrate_cache, src_video, src_mask, src_ref_images,
      control_video, ref_image;
  int64_t index = 0, frames = 0, max_area = 0;  // 0: the VAE's release (wan/vae/release_video.hpp)
  int steps = 50, threads = 0, sp = 0;          // sp 0: the ranks of the job
  double shift = 5.0, fps = 0, boundary = 0;    // fps 0: the VAE's release
  double vace_scale = 1.0;
  std::string cache_threshold = "auto", cache_keep_first = "auto", cache_max_skips = "auto";  // auto: the method's
  uint64_t seed = 0;
  bool compare = false, offload_experts = false, first_frame = false, cfg_parallel = false, shard_weights = false,
       dry_run = false;
  std::vector<std::string> loras, lora_scales, loras_high, loras_low;
};

// wansample's lines: "wansample: ..." on stdout, warnings on stderr, from
// rank 0 alone (every rank runs the same pipeline). A table's lines after
// the first stay as they are.
class ToolReporter : public Reporter {
 public:
  explicit ToolReporter(bool shown) : shown_(shown) {}
  void report(Severity severity, const std::string& message) override {
    if (!shown_) return;
    auto& stream = severity == Severity::Info ? std::cout : std::cerr;
    stream << "wansample: "
           << (severity == Severity::Warning ? "warning: "
               : severity == Severity::Error ? "error: "
                                             : "")
           << message << "\n"
           << std::flush;  // before a model that may not fit is built
  }

 private:
  bool shown_;
};

// "1.5", "2" -> numbers, or a UsageError naming the option.
std::vector<double> parse_numbers(const std::vector<std::string>& texts, const char* option, const char* what) {
  std::vector<double> values;
  for (const auto& text : texts) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value))
      throw UsageError(fmt::format("option --{}: '{}' is not {}", option, text, what));
    values.push_back(value);
  }
  return values;
}

// wansample's options, declared once: --help, the INI file and the parser read this table.
void declare_options(OptionSet& options, SampleConfig& c) {
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
              "schedulers step (docs/model.md, \"Solvers\"); a few-step student's default is its own")
      .choice("schedule", &c.schedule, {"release", "diffusers"},
              "unipc's sigmas: release (Wan's own scheduler, as the official scripts sample) or diffusers (diffusers' "
              "UniPCMultistepScheduler with flow sigmas, as WanPipeline samples); they differ by a few timesteps")
      .add("steps", &c.steps,
           "solver steps (default: a few-step student's own, the release's for a released model, else 50)")
      .add("shift", &c.shift,
           "sigma shift s: s*sigma/(1+(s-1)*sigma); with --checkpoint the run's unless given (a few-step student's: "
           "its own)")
      .add("cfg", &c.cfg,
           "classifier-free guidance scale against the unconditional (all-zero) context that wantrain --text-drop "
           "trains; 1: no guidance, 0: unconditional. With two experts LOW,HIGH: the low-noise expert's, then the "
           "high-noise one's (A14B: 3,4 text to video, 3.5,3.5 image to video); a few-step student's default: 1")
      .add("seed", &c.seed, "seed of the initial noise")
      .choice("precision", &c.precision, {"fp32", "bf16"}, "matrix products in fp32 or bf16 (autocast)")
      .choice("weights-dtype", &c.weights_dtype, {"auto", "bf16", "fp8", "fp32"},
              "the blocks' Linears held in bf16, fp8 (e4m3 with a scale per 64 inputs of a row, dequantised to "
              "bf16 for each product) or fp32 (norms, modulation, embeddings and head stay fp32); auto: bf16 for a "
              "released model, fp32 for others")
      .add("attention-chunk", &c.attention_chunk,
           "fused: the fused kernel (scaled_dot_product_attention); Q: attention over Q queries at a time; both "
           "take memory linear in the token count; 0: the whole score matrix; auto: the whole matrix while its "
           "scores fit 1 GiB per block, else the chunk whose scores do (as wantrain's)")
      .choice("cache", &c.cache, {"none", "teacache", "magcache", "easycache"},
              "step caching: skip the model's blocks on steps whose output barely changes, reusing the last "
              "residual (docs/model.md, \"Step caching\"): teacache and magcache read a calibration of the model "
              "(beside the weights, or --cache-calibration; the published one of a released Wan2.1 model), easycache "
              "needs none")
      .add(
          "cache-threshold", &c.cache_threshold,
          "auto|X: the method's threshold on its accumulated estimate of change (default teacache 0.08, magcache 0.12, "
          "easycache 0.05); higher skips more")
      .add("cache-keep-first", &c.cache_keep_first,
           "auto|N: steps run first whatever the rule (default teacache 5, magcache 20% of the steps, easycache 10)")
      .add("cache-max-skips", &c.cache_max_skips,
           "auto|K: steps a branch skips in a row at most (default magcache 2, the others no limit; 0: no limit)")
      .add("cache-calibration", &c.cache_calibration,
           "the calibration --cache teacache|magcache reads (default: step-cache.json in the weights' folder, or "
           "beside the weights file as NAME.step-cache.json)")
      .add("calibrate-cache", &c.calibrate_cache,
           "calibrate the step cache for the model as given: sample each prompt of this file (one a line, with "
           "its own --seed, --size, ... as wantrain's --sample-prompts; with --data: the samples of these indices, "
           "0,1,2) uncached, fit TeaCache's polynomial and MagCache's ratios, and write them to --out (default "
           "beside the weights)")
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
           "image2video.py does; the video takes its aspect ratio within --max-area unless --size is given "
           "(Fun-Control models: the start frame, resized to --size)")
      .add("last-image", &c.last_image, "flf2v models: the last frame, as --image is the first")
      .flag("first-frame", &c.first_frame,
            "ti2v models with --data: start from the sample's own first latent frame, held as --image holds the "
            "picture's")
      .add("src-video", &c.src_video,
           "VACE models: the control video (frame k of the file is frame k of the sample, scaled to cover the "
           "sample's size and cut around the centre), kept where --src-mask is black and remade where white (Wan2.1's "
           "generate.py --src_video; it resamples to 16 fps, this does not); without it, grey (the model makes "
           "everything)")
      .add("src-mask", &c.src_mask,
           "VACE models: a mask video for --src-video (its red channel; white: remake, black: keep); without it, "
           "everything is remade")
      .add("src-ref-images", &c.src_ref_images,
           "VACE models: pictures of what to show (comma-separated), each fitted on white to the sample's size, as "
           "generate.py --src_ref_images")
      .add("vace-scale", &c.vace_scale, "VACE models: the strength of the control (the VACE hints' scale)")
      .add("control-video", &c.control_video,
           "Fun-Control models (VideoX-Fun's Wan2.1-Fun-Control): the control video (pose, depth, edges, ...; frame "
           "k of the file is frame k of the sample, scaled to cover the sample's size and cut around the centre), "
           "encoded by --vae; --image gives the start frame, --ref-image a V1.1 model's reference picture; without "
           "it, zeros")
      .add("ref-image", &c.ref_image,
           "Fun-Control V1.1 models (add_ref_conv): a picture of what to show, resized to the sample, its latents "
           "put before the video's tokens and its CLIP features read (with --clip)")
      .add("clip", &c.clip,
           "CLIP image encoder for --image with Wan2.1 I2V/FLF2V, and for --image or --ref-image with "
           "Wan2.1-Fun-Control "
           "(models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth or safetensors of its names, ComfyUI's "
           "clip_vision_h.safetensors, or a CLIPVisionModel folder: a diffusers pipeline's image_encoder/ or root)")
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
      .add("vae-tiling", &c.vae_tiling,
           "auto|off|WxH: encode and decode the frame in tiles of WxH pixels with a quarter overlap, as diffusers' "
           "enable_tiling (auto: 256x256 tiles when the whole frame's decode would not fit the device)")
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
}

// The options into the library's typed request; an option left at its
// default leaves the setting to the release (or the run).
wan::SamplingRequest sampling_request(const SampleConfig& c, const OptionSet& options) {
  std::map<std::string, bool> given;
  for (const auto& option : options.resolved()) given[option.name] = option.source != "default";
  wan::SamplingRequest r;
  r.weights = c.weights;
  r.checkpoint = c.checkpoint;
  r.high_noise = c.high_noise;
  r.low_noise = c.low_noise;
  r.model_config = c.model_config;
  r.checkpoint_weights = c.checkpoint_weights == "ema"     ? wan::CheckpointWeightsChoice::Ema
                         : c.checkpoint_weights == "model" ? wan::CheckpointWeightsChoice::Model
                                                           : wan::CheckpointWeightsChoice::Auto;
  r.boundary = c.boundary;
  r.offload_experts = c.offload_experts;
  if (c.weights_dtype != "auto") r.weights_dtype = app::float_dtype(c.weights_dtype);
  r.loras = c.loras;
  r.loras_high = c.loras_high;
  r.loras_low = c.loras_low;
  r.lora_scales = parse_numbers(c.lora_scales, "lora-scale", "a number");
  r.prompt = c.prompt;
  if (given["negative-prompt"]) r.negative_prompt = c.negative_prompt;
  r.t5 = c.t5;
  r.t5_config = c.t5_config;
  r.tokenizer = c.tokenizer;
  r.t5_dtype = app::float_dtype(c.t5_dtype);
  r.data = c.data;
  r.text = c.text;
  r.index = c.index;
  r.frames = c.frames;
  if (!c.size.empty()) {
    if (!c.text.empty()) {  // latents: HxW
      const auto [h, w] = parse_height_width(c.size, "size");
      r.size = std::array<int64_t, 2>{h, w};
    } else {  // a video: WIDTHxHEIGHT
      const auto wh = parse_sizes(c.size, "WIDTHxHEIGHT", "832x480", "size");
      r.size = std::array<int64_t, 2>{wh[0], wh[1]};
    }
  }
  r.image = c.image;
  r.last_image = c.last_image;
  r.clip = c.clip;
  r.clip_dtype = app::float_dtype(c.clip_dtype);
  r.max_area = c.max_area;
  r.first_frame = c.first_frame;
  r.src_video = c.src_video;
  r.src_mask = c.src_mask;
  r.src_ref_images = split_list(c.src_ref_images);
  r.vace_scale = c.vace_scale;
  r.control_video = c.control_video;
  r.ref_image = c.ref_image;
  r.noise = c.noise;
  r.seed = c.seed;
  if (given["solver"]) r.solver = *wan::solver_from_name(c.solver);
  r.schedule = *wan::schedule_from_name(c.schedule);
  if (given["steps"]) r.steps = c.steps;
  if (given["shift"]) r.shift = c.shift;
  if (given["cfg"]) {
    r.cfg = parse_numbers(split_list(c.cfg), "cfg", "a guidance scale of 0 or more");
    if (r.cfg.empty()) throw UsageError("option --cfg: give one scale, or LOW,HIGH with two experts");
  }
  r.cache.method = wan::parse_cache_method(c.cache);
  auto unless_auto = [](const std::string& text, const char* option, const char* what) {
    return text == "auto" ? std::optional<double>() : parse_numbers({text}, option, what)[0];
  };
  r.cache.threshold = unless_auto(c.cache_threshold, "cache-threshold", "auto or a number");
  if (const auto n = unless_auto(c.cache_keep_first, "cache-keep-first", "auto or a number of steps"))
    r.cache.keep_first = int(*n);
  if (const auto n = unless_auto(c.cache_max_skips, "cache-max-skips", "auto or a number of steps"))
    r.cache.max_skips = int(*n);
  r.cache_calibration = c.cache_calibration;
  r.compute_dtype = app::float_dtype(c.precision);
  r.attention_chunk = app::parse_attention_chunk(c.attention_chunk);
  r.sp = c.sp;
  r.cfg_parallel = c.cfg_parallel;
  r.shard_weights = c.shard_weights;
  r.out = c.out;
  r.png = c.png;
  r.vae = c.vae;
  r.vae_config = c.vae_config;
  r.vae_dtype = app::float_dtype(c.vae_dtype);
  r.vae_tiling = wan::VaeTilingChoice::parse(c.vae_tiling);
  r.video = c.video;
  r.frames_dir = c.frames_dir;
  r.fps = c.fps;
  r.compare = c.compare;
  return r;
}

int run(distributed::World& world, int argc, char** argv) {
  SampleConfig c;
  OptionSet options(
      "wansample",
      "(--weights FILE --model-config JSON | --checkpoint PATH) (--prompt TEXT | --data DIR | --text FILE) "
      "[--vae FILE --video OUT.mp4] [options]");
  declare_options(options, c);
  set_option_names(options.setting_names());  // the library's settings that errors name, as these options
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  wan::SamplingRequest r = sampling_request(c, options);
  if (c.threads > 0) torch::set_num_threads(c.threads);

  // What the pipeline reports, as wansample's lines on rank 0: every rank
  // runs it alike, so one rank's lines, not N copies.
  ToolReporter reporter(world.is_root());
  const ScopedReporter reporting(reporter);
  auto chosen = distributed::choose_device(app::parse_device(c.device), "device");
  if (world.size() > 1 && chosen.device.is_cuda() && (c.device == "auto" || c.device == "cuda"))  // a GPU a rank
    chosen.device = torch::Device(torch::kCUDA, world.local_rank() % torch::cuda::device_count());
  if (!chosen.warning.empty()) report_warning("{}", chosen.warning);

  if (!c.calibrate_cache.empty()) {
    std::vector<wan::SamplingRequest> requests;
    if (!c.data.empty()) {
      std::vector<int64_t> indices;
      for (const double index : parse_numbers(split_list(c.calibrate_cache), "calibrate-cache", "a sample index")) {
        if (index < 0 || index != std::floor(index))
          throw UsageError(fmt::format("option --calibrate-cache: with --data, {:g} is not a sample index", index));
        indices.push_back(int64_t(index));
      }
      requests = wan::calibration_requests(r, indices);
    } else {
      requests = wan::calibration_requests(r, wan::read_sample_prompts(c.calibrate_cache));
    }
    bool out_given = false;
    for (const auto& option : options.resolved())
      if (option.name == "out") out_given = option.source != "default";
    const std::string out = out_given ? c.out : wan::calibration_beside(wan::calibration_home(r));
    const auto file = wan::calibrate_step_cache(world, requests, chosen.device);
    if (world.is_root()) wan::write_calibration_file(out, file);
    report_info("wrote the step cache calibration of {} sample{} ({} steps) to {}: read by --cache teacache|magcache",
                file.samples, file.samples == 1 ? "" : "s", file.steps, out);
    return kExitOk;
  }
  wan::SamplingPipeline pipeline(world, std::move(r), chosen.device);
  if (c.dry_run) {
    report_info("dry run: what each rank holds{} (nothing was loaded)\n{}",
                world.size() > 1 ? fmt::format(" on {} ranks", world.size()) : std::string(), pipeline.plan().table());
    return kExitOk;
  }
  pipeline.write(pipeline.sample());  // every rank samples; rank 0 writes
  return kExitOk;
}

}  // namespace
}  // namespace wt

int main(int argc, char** argv) { return wt::app::run_app(argc, argv, wt::run); }
