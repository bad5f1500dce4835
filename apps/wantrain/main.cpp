// wantrain: train or distill a Wan diffusion transformer, data-parallel over MPI ranks.
// Options -> TrainConfig -> the library's typed settings -> RunPlan -> WanRun -> train::fit.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "expert_groups.hpp"
#include "export_command.hpp"
#include "plot_command.hpp"
#include "report_command.hpp"
#include "sample_ranks.hpp"
#include "train_config.hpp"
#include "wantrain/app/app.hpp"
#include "wantrain/app/attention_chunk_option.hpp"
#include "wantrain/app/job_dataset.hpp"
#include "wantrain/app/run_identity.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/config.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/projection.hpp"
#include "wantrain/wan/model/data_fits_model.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/wan/run/wan_run.hpp"
#include "wantrain/app/float_dtype.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/wan/plan/decode_memory.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/log.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/process.hpp"
#include "wantrain/util/stop_signals.hpp"
#include "wantrain/util/test_hooks.hpp"
#include "wantrain/util/threads.hpp"

namespace wt::wantrain {
namespace {

// Each rank's device as it really is: the CUDA ordinal it took and its PCI
// bus id (one GPU per task shows every rank on its own cuda:0).
std::string world_table(const distributed::World& world, const distributed::Comm& comm,
                        const distributed::BackendChoice& choice, const TrainConfig& cfg) {
  const auto peers = world.peers();
  std::string out =
      fmt::format("world: {} rank{}, backend {}\n", world.size(), world.size() == 1 ? "" : "s", comm.backend());
  std::vector<std::string> devices;
  size_t width = 8;  // "cuda:0 (PCI 0000:3b:00.0)" on GPUs, "cpu" here
  for (const auto& p : peers) {
    devices.push_back(comm.device().is_cuda() ? choice.placement.ranks.at(size_t(p.rank)).describe()
                                              : std::string("cpu"));
    width = std::max(width, devices.back().size());
  }
  out +=
      fmt::format("  {:>5}  {:<24}  {:>10}  {:<{}}  {:>7}\n", "rank", "host", "local rank", "device", width, "threads");
  for (const auto& p : peers)
    out += fmt::format("  {:>5}  {:<24}  {:>10}  {:<{}}  {:>7}\n", p.rank, p.host,
                       fmt::format("{}/{}", p.local_rank, p.local_size), devices[size_t(p.rank)], width,
                       threads_per_rank(cfg.threads, p.local_size));
  return out;
}

struct MemorySummary {
  std::string table;
  std::vector<std::string> warnings;  // one per limit the plan exceeds
};

// The memory plan of this rank (wan/plan/memory_plan.hpp) at the data's
// latents or --plan-latents, and the limits it exceeds. Data of several
// shapes (buckets) are planned at each; the largest plan is the one shown
// and held against the limits, after a row per bucket.
// --sample-prompts' encoders in the memory plan: the VAE's weights and
// its decode of the largest prompt's frame (a line's --size, else the
// training sample's), and umT5's weights, from their files' headers.
struct PromptVideoMemory {
  double video_bytes = 0, t5_bytes = 0;
};
PromptVideoMemory prompt_video_memory(const TrainConfig& cfg, const std::vector<wan::SamplePrompt>& prompts,
                                      const data::Dataset* data) {
  PromptVideoMemory memory;
  if (prompts.empty()) return memory;
  const auto vae = wan::video_vae_config(cfg.vae, cfg.vae_config);
  int64_t pixels = 0;
  if (data) {
    const auto& shape = data->shape_of(cfg.sample_index < data->size() ? cfg.sample_index : 0);
    pixels = shape.height * shape.width * vae.spatial_factor() * vae.spatial_factor();
  }
  for (const auto& p : prompts) pixels = std::max(pixels, p.width * p.height);
  const auto vae_dtype = app::float_dtype(cfg.vae_dtype);
  memory.video_bytes =
      wan::weights_bytes(cfg.vae, vae_dtype) + wan::vae_decode_bytes(vae.version, vae_dtype, pixels, 1);
  memory.t5_bytes = wan::weights_bytes(cfg.t5, app::float_dtype(cfg.t5_dtype));
  return memory;
}

MemorySummary memory_summary(distributed::World& world, const distributed::Comm& comm, const TrainConfig& cfg,
                             const std::optional<wan::WanConfig>& model_config,
                             const std::optional<wan::WanConfig>& teacher_config, const data::Dataset* data,
                             const PromptVideoMemory& prompts) {
  if (!model_config) return {};
  if (!data && cfg.plan_latents.empty())
    return {"memory plan: needs the token count: give --data, or --plan-latents FxHxW\n", {}};
  // The device planned for: --plan-device, or this run's. A plan for GPUs
  // where none is visible (a login node) takes each GPU's memory from
  // --gpu-memory, or assumes an 80 GiB one.
  const bool visible_gpu = comm.device().is_cuda();
  const bool gpu_plan = cfg.plan_device == "cuda" || (cfg.plan_device == "auto" && visible_gpu);
  const at::Device plan_device = gpu_plan ? (visible_gpu ? comm.device() : at::Device(at::kCUDA, 0)) : at::kCPU;
  std::optional<wan::MemoryPlan> root, other;            // rank 0's (with the checkpoint copy) and another rank's
  std::optional<wan::MemoryPlanSettings> root_settings;  // root's, for the block swap suggestion
  std::string bucket_rows;
  world.agree([&] {
    std::vector<std::pair<std::string, std::array<int64_t, 3>>> shapes;  // (bucket, latents F, H, W)
    if (data)
      for (const auto& b : data->buckets())
        shapes.push_back({b.name(), {b.shape.frames, b.shape.height, b.shape.width}});
    else
      shapes.push_back({"", plan_latents(cfg)});
    const int64_t text_len = data ? data->buckets().front().shape.text_len : model_config->text_len;
    // Each sample's latents and text (and an image-to-video model's y and
    // CLIP features), and the noise the loader draws for it: eps (fp32, the
    // latents' shape), sigma (fp32) and the caption- and image-drop flags.
    auto sample_bytes = [&](const std::array<int64_t, 3>& latents) {
      const auto& m = *model_config;
      const double positions = double(latents[0] * latents[1] * latents[2]);
      const double latent_elements = double(m.out_dim) * positions;
      const double condition_elements =
          double(m.condition_channels()) * positions +
          (m.image_branch() ? double(m.condition_images() * m.image_tokens * m.image_dim) : 0.0);
      const double sample_elements = latent_elements + condition_elements + double(text_len * m.text_dim);
      return 4 * sample_elements + 4 * latent_elements + 4 + 2;
    };
    // The loader keeps its batch buffers per shape (data/loader.hpp): with
    // buckets, every shape's are held at once.
    double loader_bytes = 0;
    for (const auto& shape : shapes) loader_bytes += sample_bytes(shape.second);
    std::vector<wan::MemoryPlan> roots, others;
    std::vector<wan::MemoryPlanSettings> root_settings_of;  // per shape, as planned
    for (const auto& [name, latents] : shapes) {
      auto settings =
          memory_plan_settings(cfg, *model_config, teacher_config, latents, loader_bytes, plan_device, world.size());
      if (data) settings.staged_bytes = double(train::staged_bytes_per_sample(data->largest_shape(), gpu_plan));
      settings.loader_shapes = int(shapes.size());
      settings.runtime_bytes = current_rss_bytes();
      settings.prompt_video_bytes = prompts.video_bytes;
      settings.prompt_t5_bytes = prompts.t5_bytes;
      try {
        settings.checkpoint_snapshot = true;
        roots.push_back(wan::plan_memory(settings));
        root_settings_of.push_back(settings);
        settings.checkpoint_snapshot = false;
        others.push_back(wan::plan_memory(settings));
      } catch (const UsageError& e) {  // latents that do not fit the patch: name where they came from
        if (data) throw;
        throw UsageError(fmt::format("option --plan-latents: {}", e.what()));
      }
    }
    const auto total = [&](const wan::MemoryPlan& p) { return gpu_plan ? p.device_total() : p.total(); };
    const size_t largest = size_t(std::max_element(roots.begin(), roots.end(),
                                                   [&](const auto& x, const auto& y) { return total(x) < total(y); }) -
                                  roots.begin());
    if (shapes.size() > 1)
      for (size_t b = 0; b < shapes.size(); ++b)
        bucket_rows += fmt::format("  bucket {:<14} {:>10}  total; activations {}{}\n", shapes[b].first,
                                   wan::format_bytes(total(roots[b])), wan::format_bytes(roots[b].activations.total()),
                                   b == largest ? " (the largest: the plan below)" : "");
    root = roots[largest];
    other = others[largest];
    root_settings = root_settings_of[largest];
  });
  // This rank's plan is shown (rank 0's, which prints it, with the
  // checkpoint copy); the limits hold the node's ranks together.
  const auto& shown = world.is_root() ? *root : *other;
  std::string table =
      bucket_rows.empty() ? shown.describe() : "memory plan per rank, per bucket:\n" + bucket_rows + shown.describe();
  wan::MemoryLimits limits;
  limits.gpu_plan = gpu_plan;
  limits.host_bytes = physical_memory_bytes();
  limits.ranks_on_host = world.local_size();
  std::string device_line;
  if (!gpu_plan) {
    device_line = cfg.plan_device == "cpu" ? "--plan-device cpu"
                                           : "auto: this run is on the CPU (--plan-device cuda plans a job for GPUs)";
  } else if (cfg.gpu_memory > 0) {
    limits.device_bytes = cfg.gpu_memory * double(1 << 30);
    limits.device_source = "--gpu-memory";
    device_line = visible_gpu ? "this rank's GPU (" + comm.device().str() + ")" : "--plan-device cuda";
  } else if (visible_gpu) {
    const double capacity = distributed::cuda_device_memory_bytes(comm.device().index());
    if (capacity > 0) limits.device_bytes = capacity;  // 0: unreadable, no comparison
    limits.device_source = "this rank's GPU (" + comm.device().str() + ")";
    device_line = cfg.plan_device == "cuda" ? "--plan-device cuda" : "auto: " + limits.device_source;
  } else {
    limits.device_bytes = 80.0 * double(1 << 30);
    limits.device_source = "assumed, as this run has no GPU (--gpu-memory GiB)";
    device_line = "--plan-device cuda";
  }
  table += fmt::format("  {:<16} {:>10}  {}\n", "planned for", gpu_plan ? "GPUs" : "CPU", device_line);
  table += wan::describe_limits(*root, *other, limits);
  // A LoRA run that does not fit its GPUs: how many blocks to swap would do.
  if (gpu_plan && limits.device_bytes && root->device_total() > *limits.device_bytes && cfg.lora_rank > 0) {
    auto swap = wan::smallest_blocks_to_swap(*root_settings, *limits.device_bytes);
    std::string with = "";
    // Not enough alone: with the checkpointed inputs offloaded too?
    auto offloading = *root_settings;
    offloading.step.offload_checkpointed = true;
    if (!swap && offloading.step.grad_checkpoint_every > 0 && !root_settings->step.offload_checkpointed) {
      const double offloaded = wan::plan_memory(offloading).device_total();
      swap = offloaded <= *limits.device_bytes ? std::optional(wan::SwapSuggestion{0, offloaded})
                                               : wan::smallest_blocks_to_swap(offloading, *limits.device_bytes);
      with = "--activation-offload";
    }
    const std::string options = swap && swap->blocks > 0 ? (with.empty() ? "" : with + " and ") +
                                                               fmt::format("--blocks-to-swap {}", swap->blocks)
                                                         : with;
    table += swap ? fmt::format("  {:<16} {:>10}  on each GPU with {}, the fewest blocks swapped that fit\n",
                                "block swap", wan::format_bytes(swap->device_bytes), options)
                  : fmt::format("  {:<16} {:>10}  no --blocks-to-swap fits{}: the rest is more than the GPU\n",
                                "block swap", "",
                                root_settings->step.grad_checkpoint_every > 0 ? ", with --activation-offload or not"
                                                                              : " (--grad-checkpoint blocks may help)");
  }
  return {table, wan::memory_warnings(*root, *other, limits)};
}

// What each sample rank holds (--sample-ranks), for the banner: the
// model's weights (both experts'), held as sample_ranks.cpp holds them, a
// forward of the training sample's size with its tokens split over the
// sample ranks, and with --sample-prompts the VAE and its decode.
std::string sample_rank_memory(const TrainConfig& cfg, const std::optional<wan::WanConfig>& model,
                               const data::Dataset* data, at::ScalarType compute_dtype, int models,
                               const PromptVideoMemory& prompts) {
  if (!model || (!data && cfg.plan_latents.empty())) return "";
  wan::ActivationSettings step;
  if (data) {
    const auto& shape = data->shape_of(cfg.sample_index < data->size() ? cfg.sample_index : 0);
    step.latents = {shape.frames, shape.height, shape.width};
  } else {
    step.latents = plan_latents(cfg);
  }
  step.compute_dtype = compute_dtype;
  step.attention_chunk = app::parse_attention_chunk(cfg.attention_chunk);
  step.per_token_timesteps = cfg.condition == "first-frame";
  step.sequence_parallel = cfg.sample_ranks;
  const auto memory =
      wan::plan_sampling(*model, step, models, /*offload_experts=*/false, sample_rank_linear_dtype(cfg, compute_dtype));
  const double videos = prompts.video_bytes;
  return fmt::format("; each holds {}: {}weights {}, a forward {}{}", wan::format_bytes(memory.device_bytes() + videos),
                     models == 2 ? "two experts' " : "", wan::format_bytes(memory.experts * memory.expert_bytes),
                     wan::format_bytes(memory.forward_bytes),
                     videos > 0 ? fmt::format(", the VAE and its decode {}", wan::format_bytes(videos)) : "");
}

// With --experts: the job, its groups and this rank's, for train() on the group.
struct ExpertRun {
  const distributed::World& job;
  const ExpertLayout& layout;
  const ExpertGroup& group;
};
int train(distributed::World& world, const TrainConfig& cfg, const OptionSet& options, int argc, char** argv,
          const ExpertRun* experts, train::SampleSender* sample_sender);
int train_experts(distributed::World& world, const TrainConfig& cfg, const OptionSet& options, int argc, char** argv,
                  const SampleRanks* samples);
int train_with_sample_ranks(distributed::World& job, const TrainConfig& cfg, const OptionSet& options, int argc,
                            char** argv);

int run(distributed::World& world, int argc, char** argv) {
  TrainConfig cfg;
  OptionSet options(
      "wantrain",
      "[--config run.ini] [options]\n       wantrain plot RUN_DIR [--out FILE]   wantrain report RUN_DIR\n"
      "       wantrain export --checkpoint PATH --out FILE [--ema] "
      "(see wantrain export --help)\n       wantrain export --model-config C.json --seed S --out FILE "
      "[--random-head] [--dtype bf16]");
  declare_options(options, cfg);
  set_option_names(options.setting_names());  // the library's settings that errors name, as these options

  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    for (const auto& option : options.resolved())
      if (option.source != "default") cfg.given.insert(option.name);
    if (outcome == OptionSet::Outcome::Run) validate(cfg);
  });
  if (outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  world.set_timeout(app::comm_timeout(cfg));  // bounds every start-up agreement below, too
  if (cfg.sample_ranks > 0) return train_with_sample_ranks(world, cfg, options, argc, argv);
  if (!cfg.experts.empty()) return train_experts(world, cfg, options, argc, argv, nullptr);
  return train(world, cfg, options, argc, argv, nullptr, nullptr);
}

// One training run on `world` (the job, or an expert's rank group: `experts`).
int train(distributed::World& world, const TrainConfig& cfg, const OptionSet& options, int argc, char** argv,
          const ExpertRun* experts, train::SampleSender* sample_sender) {
  const ExpertGroup* group = experts ? &experts->group : nullptr;
  const auto comm_timeout = app::comm_timeout(cfg);

  // The data are checked on every rank before anything else starts; a bad
  // dataset is one line and status 2 for the whole job.
  // Node-local copies of part of a dataset are allowed with shard affinity.
  std::optional<data::Dataset> dataset;
  if (!cfg.data.empty()) dataset = app::open_job_dataset(world, cfg.data, cfg.shard_affinity);

  // The model config, and whether the data fit it, likewise.
  std::string model_summary = "model: none given (--model-config)\n";
  std::optional<wan::WanConfig> model_config;
  world.agree([&] {
    if (cfg.model_config.empty()) return;
    const auto config = wan::load_model_config(cfg.model_config);
    model_config = config;
    if (dataset) wan::check_data_fits_model(*dataset, config, cfg.model_config);
    if (!cfg.val_data.empty()) wan::check_data_fits_model(data::Dataset::open(cfg.val_data), config, cfg.model_config);
    if (cfg.image_drop > 0 && !config.image_branch())
      throw SettingError("image_drop", fmt::format("model config {} ({}) has no CLIP branch whose features could be "
                                                   "dropped",
                                                   cfg.model_config, wan::model_type_name(config.model_type)));
    if (cfg.condition == "first-frame" && config.model_type != wan::ModelType::TI2V)
      throw SettingError("condition", fmt::format("the first-frame condition is Wan2.2 TI2V's: model config {} is {}, "
                                                  "not ti2v (set \"model_type\": \"ti2v\")",
                                                  cfg.model_config, wan::model_type_name(config.model_type)));
    const int64_t params = wan::parameter_count(config);
    model_summary = fmt::format(
        "model: {}: {} parameters ({:.1f} MB in fp32), dim {}, {} layers, {} heads of {}{}\n", cfg.model_config, params,
        double(params) * 4 / 1e6, config.dim, config.num_layers, config.num_heads, config.head_dim(),
        config.model_type == wan::ModelType::T2V ? std::string()
                                                 : fmt::format(", {}{}", wan::model_type_name(config.model_type),
                                                               config.image_branch() ? " with the CLIP branch" : ""));
  });

  // Sequence parallelism: whole groups of ranks, and heads that split over one.
  world.agree([&] {
    if (cfg.sp == 1) return;
    if (world.size() % cfg.sp != 0)
      throw SettingError("sp", fmt::format("is {}: it must divide the job's {} ranks (groups of consecutive ranks)",
                                           cfg.sp, world.size()));
    if (model_config && model_config->num_heads % cfg.sp != 0)
      throw SettingError("sp", fmt::format("is {}: model config {}'s {} heads do not split over {} ranks", cfg.sp,
                                           cfg.model_config, model_config->num_heads, cfg.sp));
  });

  // Distillation: the teacher's config, whether the data fit it too, and
  // whether the student can be projected from it, before any weights load.
  std::optional<wan::WanConfig> teacher_config;
  world.agree([&] {
    if (cfg.mode != "distill") return;
    const auto config = wan::resolve_teacher_config(cfg.teacher, cfg.teacher_config);
    teacher_config = config;
    const std::string source = (cfg.teacher_config.empty() ? "the config stored in --teacher " + cfg.teacher
                                                           : "--teacher-config " + cfg.teacher_config) +
                               " (the teacher's)";
    // An image student's frames reach a video teacher as stills (wan/objective/teacher.hpp).
    auto seen = config;
    if (model_config && model_config->patch_size[0] == 1) seen.patch_size[0] = 1;
    if (dataset) wan::check_data_fits_model(*dataset, seen, source);
    if (cfg.distill_steps > 0 && model_config && wan::to_json(config) != wan::to_json(*model_config))
      throw UsageError(fmt::format(
          "option --distill-steps: a few-step student has its teacher's architecture, but --model-config {} differs "
          "from {}; give the teacher's config",
          cfg.model_config, source));
    // Released weights were guided against the release's negative prompt,
    // which this objective does not encode: said, not silently different.
    if (const auto release = wan::release_sampling(config, /*two_experts=*/false, 832 * 480);
        release && cfg.distill_steps > 0 && world.is_root())
      spdlog::warn(
          "--distill-steps: the teacher has {}'s architecture; the student learns its guidance against the all-zero "
          "context (what --text-drop trains), not the release's negative prompt",
          release->model);
    if (model_config && cfg.student_init == "projection" && cfg.init.empty() && cfg.distill_steps == 0)
      wan::check_projectable(config, "--teacher " + cfg.teacher, *model_config, "--model-config " + cfg.model_config);
    const std::string student_init = !cfg.init.empty()       ? "--init " + cfg.init
                                     : cfg.distill_steps > 0 ? "the teacher's weights"
                                                             : cfg.student_init;
    model_summary +=
        fmt::format("teacher: {}: {} parameters, dim {}, {} layers, held in {}; student init: {}{}\n", cfg.teacher,
                    wan::parameter_count(config), config.dim, config.num_layers, cfg.teacher_precision, student_init,
                    cfg.resume.empty() ? "" : " (when --resume finds no checkpoint)");
  });

  torch::set_num_threads(threads_per_rank(cfg.threads, world.local_size()));

  distributed::CommOptions comm_options;
  comm_options.timeout = comm_timeout;
  std::unique_ptr<distributed::Comm> comm;
  const auto choice = distributed::choose_backend(world, requested_backend(cfg));
  // Computing on the CPU of a GPU node is never silent: one warning, or with
  // --require-gpu the run's one error line.
  const std::string on_cpu = distributed::cpu_on_gpu_nodes(world, choice, distributed::nvidia_gpus_on_node());
  world.agree([&] {
    if (cfg.require_gpu && choice.backend != distributed::Backend::Nccl)
      throw UsageError("option --require-gpu: " +
                       (on_cpu.empty() ? std::string("no rank of this job sees an NVIDIA GPU") : on_cpu));
  });
  if (!on_cpu.empty() && world.is_root()) spdlog::warn("{}", on_cpu);
  world.agree([&] { comm = distributed::make_comm(world, choice, comm_options); });

  // A memory plan for another device than this run's is for planning only.
  world.agree([&] {
    const bool visible_gpu = comm->device().is_cuda();
    if (cfg.plan_device != "auto" && (cfg.plan_device == "cuda") != visible_gpu && !cfg.dry_run)
      throw UsageError(fmt::format("option --plan-device: {} is not this run's device ({}): only with --dry-run",
                                   cfg.plan_device, comm->device().str()));
    if (cfg.gpu_memory > 0 && cfg.plan_device == "auto" && !visible_gpu)
      throw UsageError(
          "option --gpu-memory: the plan is for the CPU, this run's device: add --plan-device cuda to plan for GPUs");
  });
  // The run plan, computed once: what the banner prints and everything below uses.
  train::RunPlan plan;
  world.agree([&] {
    plan = train::plan_run(run_settings(cfg, comm->device()), world.size(), world.rank(),
                           dataset ? dataset->layout() : data::DataLayout{});
  });
  // What a training run lacks is its one line, before the configuration table.
  world.agree([&] {
    if (cfg.dry_run) return;
    if (!dataset) throw UsageError("option --data: a training dataset is needed (or --dry-run)");
    if (!model_config) throw UsageError("option --model-config: a model config is needed (or --dry-run)");
    if (plan.total_steps <= 0) throw UsageError("option --steps: give --steps N or --epochs N to train");
  });
  const std::string data_summary =
      dataset ? fmt::format("data: {} ({} shards, {} samples), latents {}, text_emb {}\n{}", cfg.data,
                            dataset->shards().size(), dataset->size(), dataset->describe_buckets(),
                            dataset->buckets().front().shape.text_string(), plan.describe_epoch())
              : std::string("data: none given (--data)\n");
  const std::string table = world_table(world, *comm, choice, cfg);
  // The prompt file's lines, each bad one its line, before anything is trained;
  // their encoders in the memory plan.
  std::vector<wan::SamplePrompt> sample_prompts;
  world.agree([&] {
    if (!cfg.sample_prompts.empty()) sample_prompts = wan::read_sample_prompts(cfg.sample_prompts);
  });
  PromptVideoMemory prompt_memory;
  world.agree([&] { prompt_memory = prompt_video_memory(cfg, sample_prompts, dataset ? &*dataset : nullptr); });
  // With sample ranks the encoders are theirs, not the training ranks'.
  const MemorySummary memory =
      memory_summary(world, *comm, cfg, model_config, teacher_config, dataset ? &*dataset : nullptr,
                     cfg.sample_ranks > 0 ? PromptVideoMemory{} : prompt_memory);
  std::string group_summary =
      group
          ? fmt::format("expert group: {}, job ranks {}-{}, sigma' in [{:g}, {:g}], its run in {}, starting from {}\n",
                        group->name, group->first_rank, group->first_rank + group->ranks - 1, group->sigma_lo,
                        group->sigma_hi, cfg.output_dir, cfg.init.empty() ? "random weights" : cfg.init)
          : std::string();
  if (cfg.sample_ranks > 0)
    group_summary += fmt::format("sample ranks: job ranks {}-{} draw the samples (--sample-ranks {}); {} train{}{}\n",
                                 world.job_size() - cfg.sample_ranks, world.job_size() - 1, cfg.sample_ranks,
                                 experts ? "the expert groups" : "the others",
                                 experts ? "" : fmt::format(" (ranks 0-{})", world.size() - 1),
                                 sample_rank_memory(cfg, model_config, dataset ? &*dataset : nullptr,
                                                    plan.engine.compute_dtype, experts ? 2 : 1, prompt_memory));
  auto print_banner = [&] {
    if (!world.is_root()) return;
    log::info_lines("wantrain " WANTRAIN_VERSION ": resolved configuration\n" + options.resolved_table() +
                    group_summary + table + data_summary + model_summary + plan.describe() + memory.table);
    for (const auto& b : plan.untrained_buckets())
      spdlog::warn(
          "bucket {}: its {} samples are fewer than one global batch of {}, so no step trains on them; use a "
          "smaller batch, fewer ranks or --no-drop-last",
          b.name, b.samples, plan.global_batch());
    for (const auto& warning : memory.warnings) spdlog::warn("{}", warning);
  };
  if (!experts) {
    print_banner();
  } else {  // the groups' banners one after the other: two at once tear each other's lines in a log file
    for (const auto& in_turn : experts->layout.groups) {
      if (in_turn.first_rank == group->first_rank) print_banner();
      experts->job.barrier();
    }
  }
  comm->barrier();  // the collectives work end to end
  if (cfg.dry_run) return kExitOk;
  // Checked against the model and the VAE; each rank's prompts encoded by
  // umT5 once, here (the encoder freed before training starts).
  std::unique_ptr<wan::PromptVideos> prompt_videos;
  world.agree([&] {
    if (sample_prompts.empty() || cfg.sample_ranks > 0) return;  // the sample ranks encode them
    const auto index = cfg.sample_index < dataset->size() ? cfg.sample_index : 0;
    const auto& shape = dataset->shape_of(index);
    prompt_videos = std::make_unique<wan::PromptVideos>(
        *model_config,
        prompt_video_options(cfg, sample_prompts, {shape.frames, shape.height, shape.width}, plan.engine.compute_dtype,
                             world.rank(), world.size()),
        comm->device());
  });
  if (prompt_videos && world.is_root())
    spdlog::info("sample prompts: {} prompts of {}, spread over {} rank{}; umT5 freed", sample_prompts.size(),
                 cfg.sample_prompts, world.size(), world.size() == 1 ? "" : "s");

  nlohmann::json run_options = nlohmann::json::object();
  for (const auto& option : options.resolved()) run_options[option.name] = option.value;
  if (group) {  // the group's own run, as a one-expert run of it would record
    run_options["output-dir"] = cfg.output_dir;
    run_options["init"] = cfg.init;
    run_options["timestep-range"] = cfg.timestep_range;
    run_options["resume"] = cfg.resume;
  }
  train::FitOptions fit_options = wantrain::fit_options(cfg);
  fit_options.run_options = run_options.dump();
  fit_options.identity = app::run_identity("wantrain", world, *comm, argc, argv);
  fit_options.model_config = wan::to_json(*model_config);
  train::StartPoint start = train::start_run(world, fit_options, cfg.resume, "--model-config " + cfg.model_config);

  std::unique_ptr<train::Validator> validator;
  world.agree([&] {
    if (!cfg.val_data.empty())
      validator = std::make_unique<train::Validator>(
          std::make_unique<train::ShardSamples>(data::Dataset::open(cfg.val_data)), cfg.batch_size);
  });
  // Every rank loads the frozen teacher (from the shared file system, as the
  // data), on the CPU in its precision, in an agreement of its own: a rank
  // that cannot read it must not leave the others in the Engine's broadcast.
  std::unique_ptr<wan::Teacher> teacher;
  world.agree([&] {
    if (teacher_config)
      teacher = std::make_unique<wan::Teacher>(
          cfg.teacher, *teacher_config,
          cfg.teacher_config.empty() ? "stored in the checkpoint" : "--teacher-config " + cfg.teacher_config,
          teacher_dtype(cfg));
  });
  std::unique_ptr<wan::WanRun> run;
  world.agree([&] {
    auto run_options = wan_run_options(cfg);
    if (cfg.sample_ranks > 0) run_options.sample.reset();  // the sample ranks draw
    run = std::make_unique<wan::WanRun>(plan, run_options, *comm, std::move(*dataset), *model_config, start,
                                        teacher.get());
  });
  if (cfg.sample_ranks > 0) run->hand_samples_to(sample_sender);
  if (prompt_videos)
    run->set_prompt_videos([&](wan::WanModelImpl& model, int64_t step) { return prompt_videos->draw(model, step); });
  run->connect(*comm, start);
  start.checkpoint.reset();  // its state lives in the run now
  const int status = train::fit(world, *comm, plan, run->fit_run(validator.get()), fit_options, start.best_val_loss);
  test_delay("after_fit");
  return status;
}

// A training group's rank 0, however it ended: the sample ranks draw what
// they were sent and finish, or the job ends after --checkpoint-timeout.
void end_hand_offs(train::SampleSender& sender, int status, const TrainConfig& cfg, const SampleRanks& samples) {
  const auto bound = std::chrono::milliseconds(static_cast<std::int64_t>(cfg.checkpoint_timeout * 1000));
  if (sender.finish(status, bound)) return;
  distributed::abort_job(
      fmt::format("the sample ranks ({}-{}) have not finished their last sample {:g} s after training ended with "
                  "status {} (--checkpoint-timeout): ending the job",
                  samples.first_rank, samples.first_rank + samples.ranks - 1, cfg.checkpoint_timeout, status),
      kExitFailure);
}

// Wan2.2 A14B's two experts in one job (expert_groups.hpp): the job splits
// into two rank groups, each trains its expert as a run of its own. A group
// that fails ends the whole job with one line naming it, rather than leave
// the other training on alone for a model that lacks half its experts.
int train_experts(distributed::World& world, const TrainConfig& cfg, const OptionSet& options, int argc, char** argv,
                  const SampleRanks* samples) {
  ExpertLayout layout;
  world.agree([&] {
    std::optional<wan::WanConfig> model;
    if (!cfg.model_config.empty()) model = wan::load_model_config(cfg.model_config);
    layout = expert_layout(cfg, world.size(), model);
    record_expert_layout(layout, cfg, /*write=*/world.is_root() && !cfg.dry_run);
  });
  if (world.is_root()) log::info_lines(layout.describe());
  const auto& group = layout.group_of(world.rank());
  int status = kExitOk;
  const auto group_world = world.split(group.first_rank);
  set_process_group(group.name + " expert group");
  log::set_group(world.job_rank(), world.job_size(), group.name, group_world->rank(), group_world->size());
  std::unique_ptr<train::SampleSender> sender;  // each group's rank 0 sends its expert
  if (samples && group_world->is_root() && !cfg.dry_run)
    sender = std::make_unique<train::SampleSender>(samples->channel, samples->first_rank);
  try {
    const ExpertRun experts{world, layout, group};
    status = train(*group_world, expert_run_config(cfg, group), options, argc, argv, &experts, sender.get());
  } catch (const distributed::CollectiveExit& exit) {
    status = exit.code;
  }
  if (sender) end_hand_offs(*sender, status, cfg, *samples);
  // A stop (75) is every group's own, at its own step: each saved its run.
  // A failure aborts while the group's communicator is still held: freeing
  // it is collective, and the other group is still training.
  if (status != kExitOk && status != kExitRequeue) {
    const auto line = fmt::format("the {} expert group (ranks {}-{}) ended with status {}: ending the whole job",
                                  group.name, group.first_rank, group.first_rank + group.ranks - 1, status);
    // The group's first rank says it once; the others follow if it cannot.
    if (world.rank() != group.first_rank) std::this_thread::sleep_for(std::chrono::seconds(5));
    distributed::abort_job(line, status);
  }
  return status;
}

// --sample-ranks K (sample_ranks.hpp): the job's last K ranks draw the
// samples, the others train (one run, or the expert groups). What both need
// is checked once for the job, before it splits; a sample group that fails
// on its own ends the whole job with one line naming it.
int train_with_sample_ranks(distributed::World& job, const TrainConfig& cfg, const OptionSet& options, int argc,
                            char** argv) {
  const int ranks = cfg.sample_ranks, training = job.size() - cfg.sample_ranks;
  std::optional<ExpertLayout> layout;
  job.agree([&] {
    if (training < 1)
      throw UsageError(
          fmt::format("option --sample-ranks: {} of the job's {} ranks leave none to train", ranks, job.size()));
    if (cfg.data.empty() && !cfg.dry_run)
      throw UsageError("option --data: a training dataset is needed (or --dry-run)");
    if (cfg.model_config.empty())
      throw UsageError("option --model-config: a model config is needed (the sample ranks build the model)");
    const auto config = wan::load_model_config(cfg.model_config);
    if (ranks > 1 && config.num_heads % ranks != 0)
      throw UsageError(
          fmt::format("option --sample-ranks: model config {}'s {} heads do not split over {} ranks "
                      "(the sample ranks split each video's tokens)",
                      cfg.model_config, config.num_heads, ranks));
    if (!cfg.sample_prompts.empty()) wan::read_sample_prompts(cfg.sample_prompts);
    if (!cfg.experts.empty()) layout = expert_layout(cfg, training, config);
    if (cfg.experts.empty() && training % cfg.sp != 0)  // before the sample ranks start
      throw UsageError(
          fmt::format("option --sp: is {}: it must divide the {} training ranks (the job's {} less --sample-ranks {})",
                      cfg.sp, training, job.size(), ranks));
  });
  const train::SampleChannel channel(job);
  const SampleRanks samples{channel, training, ranks};
  const bool sampling = job.rank() >= training;
  const auto group = job.split(sampling ? 1 : 0);
  int status = kExitOk;
  if (sampling) {
    set_process_group("sample ranks");
    log::set_group(job.rank(), job.size(), "sample", group->rank(), group->size());
    try {
      if (!cfg.dry_run) status = run_sample_ranks(*group, cfg, samples, layout ? &*layout : nullptr);
    } catch (const distributed::CollectiveExit& exit) {  // their own start-up failed: the line is out
      if (group->rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(5));
      distributed::abort_job(fmt::format("the sample ranks ({}-{}) ended with status {}: ending the whole job",
                                         training, training + ranks - 1, exit.code),
                             exit.code);
    }
    return status;
  }
  if (layout) return train_experts(*group, cfg, options, argc, argv, &samples);
  std::unique_ptr<train::SampleSender> sender;
  if (group->is_root() && !cfg.dry_run) sender = std::make_unique<train::SampleSender>(channel, training);
  try {
    status = train(*group, cfg, options, argc, argv, nullptr, sender.get());
  } catch (const distributed::CollectiveExit& exit) {
    status = exit.code;
  }
  if (sender) end_hand_offs(*sender, status, cfg, samples);
  return status;
}

}  // namespace
}  // namespace wt::wantrain

int main(int argc, char** argv) {
  // `wantrain export ...`, `plot ...` and `report ...` are subcommands; everything else is a training run.
  if (argc > 1 && std::string(argv[1]) == "export") return wt::app::run_app(argc - 1, argv + 1, wt::run_export);
  if (argc > 1 && std::string(argv[1]) == "plot") return wt::app::run_local(argc - 1, argv + 1, wt::run_plot);
  if (argc > 1 && std::string(argv[1]) == "report") return wt::app::run_local(argc - 1, argv + 1, wt::run_report);
  // For the whole life of a training process, a stop signal is recorded and
  // answered (train/fit.hpp): before the first step, exit 75 with nothing to
  // save; at a step boundary, checkpoint and 75; during the final
  // checkpoint, finish it and 75; after the run, ignored (status 0), also
  // while the process exits.
  int status = 0;
  {
    const wt::StopSignalHandlers stop_signals;
    status = wt::app::run_app(argc, argv, wt::wantrain::run);
  }
  wt::test_delay("after_run");  // a test's window for a signal while the process exits
  return status;
}
