#include "wantrain/wan/run/run_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/plan/decode_memory.hpp"
#include "wantrain/wan/plan/sampling_plan.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/wan/run/sample_ranks.hpp"

namespace wt::wan {
namespace {

// The latents planned at: the data's training sample, else the plan's.
std::array<int64_t, 3> sample_latents(const TrainSettings& settings, const data::Dataset* data) {
  if (!data) return *settings.plan.latents;
  const auto& shape = data->shape_of(settings.sample_index < data->size() ? settings.sample_index : 0);
  return {shape.vace_references + shape.frames, shape.height, shape.width};  // VACE: the references' frames too
}

// The plans of rank 0 (with the checkpoint copy) and of another rank, at
// the largest of the data's shapes, with its settings and a row per bucket.
struct ShapePlans {
  MemoryPlan root, other;
  MemoryPlanSettings root_settings;  // for the block swap suggestion
  std::string bucket_rows;
};

// Each sample's latents and text (and an image-to-video model's y and CLIP
// features, a VACE model's context), and the noise the loader draws for
// it: eps (fp32, the latents' shape), sigma (fp32) and the caption- and
// image-drop flags. A VACE sample's `latents` frames count its reference
// frames (what the model runs, and the context's frames).
double loader_sample_bytes(const WanConfig& m, const std::array<int64_t, 3>& latents, int64_t text_len) {
  const double positions = double(latents[0] * latents[1] * latents[2]);
  const double latent_elements = double(m.out_dim) * positions;
  const double condition_elements =
      double(m.condition_channels() + (m.vace() ? m.vace_in_dim : 0)) * positions +
      (m.image_branch() ? double(m.condition_images() * m.image_tokens * m.image_dim) : 0.0);
  const double sample_elements = latent_elements + condition_elements + double(text_len * m.text_dim);
  return 4 * sample_elements + 4 * latent_elements + 4 + 2;
}

ShapePlans plan_shapes(const TrainSettings& settings, const WanConfig& model, const std::optional<WanConfig>& teacher,
                       const data::Dataset* data, const PromptVideoMemory& prompts, const at::Device& plan_device,
                       int world_size) {
  const bool gpu_plan = plan_device.is_cuda();
  std::vector<std::pair<std::string, std::array<int64_t, 3>>> shapes;  // (bucket, latents F, H, W)
  if (data)
    for (const auto& b : data->buckets())  // VACE: the model runs the references' frames too
      shapes.push_back({b.name(), {b.shape.vace_references + b.shape.frames, b.shape.height, b.shape.width}});
  else
    shapes.push_back({"", *settings.plan.latents});
  const int64_t text_len = data ? data->buckets().front().shape.text_len : model.text_len;
  // The loader keeps its batch buffers per shape (data/loader.hpp): with
  // buckets, every shape's are held at once.
  double loader_bytes = 0;
  for (const auto& shape : shapes) loader_bytes += loader_sample_bytes(model, shape.second, text_len);
  std::vector<MemoryPlan> roots, others;
  std::vector<MemoryPlanSettings> root_settings;  // per shape, as planned
  for (const auto& [name, latents] : shapes) {
    auto s = memory_plan_settings(settings, model, teacher, latents, loader_bytes, plan_device, world_size);
    if (data) s.staged_bytes = double(train::staged_bytes_per_sample(data->largest_shape(), gpu_plan));
    s.loader_shapes = int(shapes.size());
    s.runtime_bytes = current_rss_bytes();
    s.prompt_video_bytes = prompts.video_bytes;
    s.prompt_t5_bytes = prompts.t5_bytes;
    try {
      s.checkpoint_snapshot = true;
      roots.push_back(plan_memory(s));
      root_settings.push_back(s);
      s.checkpoint_snapshot = false;
      others.push_back(plan_memory(s));
    } catch (const UsageError& e) {  // latents that do not fit the patch: name where they came from
      if (data) throw;
      throw SettingError("plan_latents", e.what());
    }
  }
  const auto total = [&](const MemoryPlan& p) { return gpu_plan ? p.device_total() : p.total(); };
  const size_t largest = size_t(
      std::max_element(roots.begin(), roots.end(), [&](const auto& x, const auto& y) { return total(x) < total(y); }) -
      roots.begin());
  ShapePlans plans{roots[largest], others[largest], root_settings[largest], ""};
  if (shapes.size() > 1)
    for (size_t b = 0; b < shapes.size(); ++b)
      plans.bucket_rows += fmt::format("  bucket {:<14} {:>10}  total; activations {}{}\n", shapes[b].first,
                                       format_bytes(total(roots[b])), format_bytes(roots[b].activations.total()),
                                       b == largest ? " (the largest: the plan below)" : "");
  return plans;
}

// The limits a plan is held against, and the line saying which device it is for.
std::pair<MemoryLimits, std::string> plan_limits(const TrainSettings& settings, const distributed::World& world,
                                                 const distributed::Comm& comm, bool gpu_plan) {
  const bool visible_gpu = comm.device().is_cuda();
  const auto& plan = settings.plan;
  const std::string plan_device = setting_reference("plan_device");
  MemoryLimits limits;
  limits.gpu_plan = gpu_plan;
  limits.host_bytes = physical_memory_bytes();
  limits.ranks_on_host = world.local_size();
  std::string device_line;
  if (!gpu_plan) {
    device_line = plan.device == PlanDevice::Cpu
                      ? plan_device + " cpu"
                      : "auto: this run is on the CPU (" + plan_device + " cuda plans a job for GPUs)";
  } else if (plan.gpu_memory_gib > 0) {
    limits.device_bytes = plan.gpu_memory_gib * double(1 << 30);
    limits.device_source = setting_reference("gpu_memory");
    device_line = visible_gpu ? "this rank's GPU (" + comm.device().str() + ")" : plan_device + " cuda";
  } else if (visible_gpu) {
    const double capacity = distributed::cuda_device_memory_bytes(comm.device().index());
    if (capacity > 0) limits.device_bytes = capacity;  // 0: unreadable, no comparison
    limits.device_source = "this rank's GPU (" + comm.device().str() + ")";
    device_line = plan.device == PlanDevice::Cuda ? plan_device + " cuda" : "auto: " + limits.device_source;
  } else {
    limits.device_bytes = 80.0 * double(1 << 30);
    limits.device_source = "assumed, as this run has no GPU (" + setting_reference("gpu_memory") + " GiB)";
    device_line = plan_device + " cuda";
  }
  return {limits, fmt::format("  {:<16} {:>10}  {}\n", "planned for", gpu_plan ? "GPUs" : "CPU", device_line)};
}

// A LoRA run that does not fit its GPUs: how many blocks to swap would do.
std::string block_swap_advice(const MemoryPlanSettings& root, double device_bytes) {
  auto swap = smallest_blocks_to_swap(root, device_bytes);
  std::string with = "";
  // Not enough alone: with the checkpointed inputs offloaded too?
  auto offloading = root;
  offloading.step.offload_checkpointed = true;
  if (!swap && offloading.step.grad_checkpoint_every > 0 && !root.step.offload_checkpointed) {
    const double offloaded = plan_memory(offloading).device_total();
    swap = offloaded <= device_bytes ? std::optional(SwapSuggestion{0, offloaded})
                                     : smallest_blocks_to_swap(offloading, device_bytes);
    with = setting_reference("activation_offload");
  }
  const std::string options = swap && swap->blocks > 0
                                  ? (with.empty() ? "" : with + " and ") +
                                        fmt::format("{} {}", setting_reference("blocks_to_swap"), swap->blocks)
                                  : with;
  if (swap)
    return fmt::format("  {:<16} {:>10}  on each GPU with {}, the fewest blocks swapped that fit\n", "block swap",
                       format_bytes(swap->device_bytes), options);
  return fmt::format("  {:<16} {:>10}  no {} fits{}: the rest is more than the GPU\n", "block swap", "",
                     setting_reference("blocks_to_swap"),
                     root.step.grad_checkpoint_every > 0
                         ? ", with " + setting_reference("activation_offload") + " or not"
                         : " (" + setting_reference("grad_checkpoint") + " blocks may help)");
}

}  // namespace

MemoryPlanSettings memory_plan_settings(const TrainSettings& settings, const WanConfig& model,
                                        const std::optional<WanConfig>& teacher, std::array<int64_t, 3> latents,
                                        double sample_bytes, const at::Device& device, int world_size) {
  const auto& run = settings.run;
  const auto& m = settings.model_run;
  MemoryPlanSettings s;
  s.model = model;
  s.step.batch = run.micro_batch;
  s.step.latents = latents;
  s.step.compute_dtype = run.compute_dtype;
  s.step.attention_chunk = m.attention_chunk;
  s.step.grad_checkpoint_every = m.grad_checkpoint;
  s.step.offload_checkpointed = m.activation_offload;
  s.step.per_token_timesteps = settings.first_frame() || model.holds_start_frame();
  s.step.sequence_parallel = run.sequence_parallel;
  s.ema = run.ema_decay > 0;
  s.lora = m.lora;
  s.vace_branch_only = m.vace_branch_only;
  s.base_dtype = m.base_dtype;
  s.blocks_to_swap = m.blocks_to_swap;
  s.teacher = teacher;
  s.teacher_bf16 = settings.distill && settings.distill->teacher_dtype == at::kBFloat16;
  s.teacher_shares_base = teacher && m.lora.rank > 0 && m.few_step && m.init.empty() && m.blocks_to_swap == 0;
  s.fake_score = teacher && m.few_step && m.few_step->method == FewStepMethod::DistributionMatching;
  if (s.fake_score) s.fake_score_lora_rank = m.few_step->fake_score_lora_rank;
  s.prefetch = m.prefetch;
  s.sample_bytes = sample_bytes;
  s.on_device = device.is_cuda();
  s.zero_shards = run.zero >= 1 ? world_size : 1;
  s.zero_stage = run.zero;
  s.gather_dtype = run.gather_dtype;
  s.bucket_bytes = double(run.bucket_bytes);
  s.grad_comm_dtype = run.grad_comm_dtype;
  return s;
}

PromptVideoMemory prompt_video_memory(const TrainSettings& settings, const std::vector<SamplePrompt>& prompts,
                                      const data::Dataset* data) {
  PromptVideoMemory memory;
  if (prompts.empty()) return memory;
  const auto& videos = settings.prompt_videos;
  const auto vae = video_vae_config(videos.vae, videos.vae_config);
  // The largest frame: a line's size, else the training sample's.
  int64_t width = 0, height = 0, frames = 1;
  if (data) {
    const auto& shape = data->shape_of(settings.sample_index < data->size() ? settings.sample_index : 0);
    width = shape.width * vae.spatial_factor(), height = shape.height * vae.spatial_factor();
    frames = 1 + (shape.frames - 1) * vae.temporal_factor();
  }
  for (const auto& p : prompts) {
    if (p.width * p.height > width * height) width = p.width, height = p.height;
    frames = std::max(frames, p.frames);  // the longest, for a bound
  }
  // Given tiles, a tiled decode; with auto the whole frame's (auto tiles only what does not fit, for less).
  const auto tiling = videos.vae_tiling.mode == VaeTilingChoice::Mode::Tiles
                          ? decode_tiling(videos.vae_tiling, vae, videos.vae_dtype, width, height, 0, "vae_tiling")
                          : std::nullopt;
  memory.video_bytes = weights_bytes(videos.vae, videos.vae_dtype) +
                       (tiling ? vae_tiled_decode_bytes(vae.version, videos.vae_dtype, *tiling, width, height, frames)
                               : vae_decode_bytes(vae.version, videos.vae_dtype, width, height));
  memory.t5_bytes = weights_bytes(videos.t5.weights, videos.t5.dtype);
  return memory;
}

MemorySummary memory_summary(distributed::World& world, const distributed::Comm& comm, const TrainSettings& settings,
                             const std::optional<WanConfig>& model_config,
                             const std::optional<WanConfig>& teacher_config, const data::Dataset* data,
                             const PromptVideoMemory& prompts) {
  if (!model_config) return {};
  if (!data && !settings.plan.latents)
    return {fmt::format("memory plan: needs the token count: give {}, or {} FxHxW\n", setting_reference("data"),
                        setting_reference("plan_latents")),
            {}};
  // The device planned for: the plan's, or this run's. A plan for GPUs
  // where none is visible (a login node) takes each GPU's memory from the
  // settings, or assumes an 80 GiB one.
  const bool visible_gpu = comm.device().is_cuda();
  const bool gpu_plan =
      settings.plan.device == PlanDevice::Cuda || (settings.plan.device == PlanDevice::Auto && visible_gpu);
  const at::Device plan_device = gpu_plan ? (visible_gpu ? comm.device() : at::Device(at::kCUDA, 0)) : at::kCPU;
  std::optional<ShapePlans> plans;
  world.agree(
      [&] { plans = plan_shapes(settings, *model_config, teacher_config, data, prompts, plan_device, world.size()); });
  // This rank's plan is shown (rank 0's, which prints it, with the
  // checkpoint copy); the limits hold the node's ranks together.
  const auto& shown = world.is_root() ? plans->root : plans->other;
  std::string table = plans->bucket_rows.empty()
                          ? shown.describe()
                          : "memory plan per rank, per bucket:\n" + plans->bucket_rows + shown.describe();
  auto [limits, device_line] = plan_limits(settings, world, comm, gpu_plan);
  table += device_line;
  table += describe_limits(plans->root, plans->other, limits);
  if (gpu_plan && limits.device_bytes && plans->root.device_total() > *limits.device_bytes &&
      (settings.model_run.lora.rank > 0 || settings.model_run.vace_branch_only))
    table += block_swap_advice(plans->root_settings, *limits.device_bytes);
  return {table, memory_warnings(plans->root, plans->other, limits)};
}

std::string sample_rank_memory(const TrainSettings& settings, const std::optional<WanConfig>& model,
                               const data::Dataset* data, int models, const PromptVideoMemory& prompts) {
  if (!model || (!data && !settings.plan.latents)) return "";
  ActivationSettings step;
  step.latents = sample_latents(settings, data);
  step.compute_dtype = settings.run.compute_dtype;
  step.attention_chunk = settings.model_run.attention_chunk;
  step.per_token_timesteps = settings.first_frame() || model->holds_start_frame();
  step.sequence_parallel = settings.sample_ranks;
  const auto memory =
      plan_sampling(*model, step, models, /*offload_experts=*/false, sample_rank_linear_dtype(settings));
  const double videos = prompts.video_bytes;
  return fmt::format("; each holds {}: {}weights {}, a forward {}{}", format_bytes(memory.device_bytes() + videos),
                     models == 2 ? "two experts' " : "", format_bytes(memory.experts * memory.expert_bytes),
                     format_bytes(memory.forward_bytes),
                     videos > 0 ? fmt::format(", the VAE and its decode {}", format_bytes(videos)) : "");
}

}  // namespace wt::wan
