#include "wantrain/wan/plan/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/nn/fp8_weights.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/wan/model/weight_names.hpp"

namespace wt::wan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct ModelBytes {
  double fp32 = 0;                      // every parameter in fp32
  double held = 0;                      // block Linears in their dtype, the rest fp32
  int64_t adapters = 0;                 // LoRA parameters for these options (rank 0: none)
  double largest_linear = 0;            // elements of the largest block Linear weight
  double block_held = 0;                // one block's parameters as held (blocks.0's)
  double vace_branch = 0;               // a VACE model's branch in fp32 (vace_blocks, vace_patch_embedding)
  std::vector<double> vace_block_held;  // each VACE block's parameters as held (swapped after the base's blocks)
};

// The bytes of a block Linear's parameter of this shape held in `dtype`:
// fp8 weights with an fp32 scale per 64 inputs of a row, and bf16 biases.
double block_linear_bytes(const std::vector<int64_t>& shape, at::ScalarType dtype) {
  const double n = double(element_count(shape));
  if (dtype != at::kFloat8_e4m3fn) return double(c10::elementSize(dtype)) * n;
  if (shape.size() < 2) return 2 * n;
  return n + 4 * double(c10::multiply_integers(nn::fp8_scale_shape(shape[0], shape[1])));
}

ModelBytes model_bytes(const WanConfig& config, at::ScalarType linear_dtype, const LoraOptions& lora) {
  const auto& targets = lora.targets.empty() ? lora_targets() : lora.targets;
  ModelBytes m;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    const double n = double(element_count(shape));
    const std::string layer = lora_target_of(name);
    m.fp32 += 4 * n;
    if (in_vace_branch(name)) m.vace_branch += 4 * n;
    // The blocks' Linears, a VACE block's projections too, are held in the blocks' dtype.
    const bool vace_projection = layer == "before_proj" || layer == "after_proj";
    const bool block = !block_linear(name).empty() || vace_projection;
    const double held = block ? block_linear_bytes(shape, linear_dtype) : 4 * n;
    m.held += held;
    if (name.rfind("blocks.0.", 0) == 0) m.block_held += held;
    if (name.rfind("vace_blocks.", 0) == 0) {
      const auto index = size_t(std::stoll(name.substr(std::string("vace_blocks.").size())));
      if (m.vace_block_held.size() <= index) m.vace_block_held.resize(index + 1, 0.0);
      m.vace_block_held[index] += held;
    }
    if (block && shape.size() == 2) m.largest_linear = std::max(m.largest_linear, n);
    // A LoRA adapter per target Linear: A [r, in] and B [out, r] (the VACE blocks' alone with vace_only).
    if (lora.rank > 0 && shape.size() == 2 && !layer.empty() &&
        std::find(targets.begin(), targets.end(), layer) != targets.end() && (!lora.vace_only || in_vace_branch(name)))
      m.adapters += lora.rank * (shape[0] + shape[1]);
  }
  return m;
}

// The teacher as Teacher holds it: fp32, or with its Linears in bf16.
double teacher_bytes(const WanConfig& config, bool bf16) {
  double bytes = 0;
  for (const auto& [name, shape] : parameter_shapes(config))
    bytes += (bf16 && held_in_bf16_by_teacher(name) ? 2 : 4) * double(element_count(shape));
  return bytes;
}

// What of the teacher a LoRA few-step student's frozen base holds alike
// (Teacher::share_frozen_weights): each tensor held in the same dtype by
// both, the base's block Linears in base_dtype and the rest in fp32.
double teacher_bytes_in_base(const WanConfig& config, bool bf16, at::ScalarType base_dtype) {
  double bytes = 0;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    const auto teacher = bf16 && held_in_bf16_by_teacher(name) ? at::kBFloat16 : at::kFloat;
    const auto base = block_linear(name).empty() ? at::kFloat : base_dtype;
    if (teacher == base) bytes += (teacher == at::kBFloat16 ? 2 : 4) * double(element_count(shape));
  }
  return bytes;
}

std::string describe_step(const ActivationSettings& s, const ActivationMemory& m) {
  std::string checkpointing = s.grad_checkpoint_every == 0 ? "no checkpointing"
                              : s.grad_checkpoint_every == 1
                                  ? "checkpointing every block"
                                  : fmt::format("checkpointing every {} blocks", s.grad_checkpoint_every);
  if (s.grad_checkpoint_every > 0 && s.offload_checkpointed) checkpointing += ", their inputs offloaded";
  const std::string split = s.sequence_parallel > 1
                                ? fmt::format(" ({} on each of {} ranks)", m.rank_tokens, s.sequence_parallel)
                                : std::string();
  return fmt::format("batch {} x {} tokens{}, {}, {}", s.batch, m.tokens, split,
                     describe_attention(s.attention_chunk, m.attention_chunk), checkpointing);
}

// The bytes of the largest `count` gradient buckets, as the Reducer forms
// them over the full model's parameters: in reverse registration order, the
// first closed at 1 MiB, the others once they reach `cap` (so a parameter
// larger than the cap is a bucket of its own).
double largest_buckets(const WanConfig& model, double cap, int count) {
  const auto shapes = parameter_shapes(model);
  std::vector<double> buckets;
  double open = 0;
  for (auto it = shapes.rbegin(); it != shapes.rend(); ++it) {
    const double limit = buckets.empty() ? double(1 << 20) : cap;
    if (open > 0 && open >= limit) {
      buckets.push_back(open);
      open = 0;
    }
    open += 4.0 * double(element_count(it->second));
  }
  if (open > 0) buckets.push_back(open);
  std::sort(buckets.rbegin(), buckets.rend());
  double bytes = 0;
  for (int i = 0; i < count && i < int(buckets.size()); ++i) bytes += buckets[size_t(i)];
  return bytes;
}

// The model's ZeRO-3 units (nn/parameter_units.hpp) as the Reducer forms
// them, in elements: one run per unit (a VACE block's in the unit of the
// base block it follows: zero_unit), the root's two ("head" and "") apart.
// With `trained`, the parameters it accepts alone (a VACE branch trained alone).
struct Units {
  std::vector<double> runs;    // every unit's, largest first
  double root = 0, block = 0;  // the root's elements, the largest block unit's
  double total = 0;
};

Units model_units(const WanConfig& model, const std::function<bool(const std::string&)>& trained = {}) {
  Units u;
  std::map<std::string, double> units;
  for (const auto& [name, shape] : parameter_shapes(model)) {
    if (trained && !trained(name)) continue;
    const double n = double(element_count(shape));
    u.total += n;
    units[zero_unit(model, name)] += n;
  }
  for (const auto& [unit, n] : units) {
    u.runs.push_back(n);
    if (nn::root_unit(unit))
      u.root += n;
    else
      u.block = std::max(u.block, n);
  }
  std::sort(u.runs.rbegin(), u.runs.rend());
  return u;
}

// The units of what a run trains in full under ZeRO-3: the model, or its VACE branch.
Units trained_units(const MemoryPlanSettings& s) {
  return s.vace_branch_only && s.lora.rank == 0 ? model_units(s.model, in_vace_branch) : model_units(s.model);
}

}  // namespace

SamplingMemory plan_sampling(const WanConfig& config, const ActivationSettings& step, int experts, bool offload_experts,
                             at::ScalarType block_linear_dtype) {
  SamplingMemory m;
  m.expert_bytes = model_bytes(config, block_linear_dtype, {}).held;
  m.forward_bytes = inference_memory(config, step);
  m.attention_chunk = planned_attention_chunk(config, step);
  m.experts = experts;
  m.experts_on_device = offload_experts ? 1 : experts;
  return m;
}

std::string describe_attention(int64_t requested, int64_t resolved) {
  const auto how = resolved == nn::kFusedAttention ? std::string("fused attention")
                   : resolved > 0                  ? fmt::format("attention chunk {}", resolved)
                                                   : std::string("full attention");
  return fmt::format("{}{}", how, requested == nn::kAutoAttentionChunk ? " (auto)" : "");
}

std::string format_bytes(double bytes) {
  if (bytes >= 1024 * kMiB) return fmt::format("{:.1f} GiB", bytes / (1024 * kMiB));
  if (bytes < 10 * kMiB) return fmt::format("{:.1f} MiB", bytes / kMiB);  // small models: not "0 MiB"
  return fmt::format("{:.0f} MiB", bytes / kMiB);
}

double MemoryPlan::total() const {
  double sum = 0;
  for (const auto& item : items) sum += item.bytes;
  return sum;
}

double MemoryPlan::device_total() const {
  double sum = 0;
  for (const auto& item : items)
    if (item.on_device) sum += item.bytes;
  return sum;
}

double MemoryPlan::host_total() const { return total() - device_total(); }

namespace {
// What block swap takes off the device: N blocks, less the 2 there at once.
// The frozen bytes block swap keeps off the device (two blocks of the chain
// and up to two VACE blocks are there at once), and those it holds in host
// memory: the first blocks_to_swap of the base's blocks, then the VACE blocks'.
struct SwappedBytes {
  double off_device = 0, host = 0;
  int64_t blocks = 0, vace_blocks = 0;
};
SwappedBytes swapped_bytes(const MemoryPlanSettings& s, const ModelBytes& m) {
  SwappedBytes b;
  b.blocks = std::min(s.blocks_to_swap, s.model.num_layers);
  b.vace_blocks =
      std::min<int64_t>(std::max<int64_t>(0, s.blocks_to_swap - s.model.num_layers), int64_t(m.vace_block_held.size()));
  b.host = double(b.blocks) * m.block_held;
  b.off_device = double(b.blocks - std::min<int64_t>(b.blocks, 2)) * m.block_held;
  std::vector<double> sides(m.vace_block_held.begin(), m.vace_block_held.begin() + b.vace_blocks);
  std::sort(sides.rbegin(), sides.rend());
  for (size_t i = 0; i < sides.size(); ++i) {
    b.host += sides[i];
    if (i >= 2) b.off_device += sides[i];
  }
  return b;
}

// The step's working memory (and plan.activations, plan.alternative,
// plan.teacher_forward): the larger of the student's step, the teacher's
// forward before it (with a fake score's graph beside the student's), and
// ZeRO-3's whole-model forward for validation and the sample. `detail`
// says what was counted.
double plan_activations(const MemoryPlanSettings& s, MemoryPlan& plan, std::string& detail) {
  const bool lora = s.lora.rank > 0;
  auto step = s.step;
  if (lora) step.block_linear_dtype = s.base_dtype;
  // Blocks gathered in bf16 leave autocast nothing to cast.
  if (s.zero_stage == 3 && s.zero_shards > 1) step.block_linear_dtype = s.gather_dtype;
  plan.activations = activation_memory(s.model, step);
  auto other = step;
  other.grad_checkpoint_every = s.step.grad_checkpoint_every > 0 ? 0 : 1;
  plan.alternative = activation_memory(s.model, other);
  detail = describe_step(step, plan.activations);
  double activations = plan.activations.total();
  if (s.teacher) {
    // The teacher predicts first, without autograd; the student's step
    // follows once its working memory is free, so the larger of the two counts.
    auto teacher_step = step;
    if (s.teacher_bf16) teacher_step.compute_dtype = at::kBFloat16;
    teacher_step.sequence_parallel = 1;  // the teacher runs whole sequences (its auto chunk: all its heads)
    // An image student's frames reach a video teacher as stills, each
    // repeated over the teacher's temporal patch (wan/objective/teacher.hpp).
    if (s.model.patch_size[0] == 1) teacher_step.latents[0] *= s.teacher->patch_size[0];
    plan.teacher_forward = inference_memory(*s.teacher, teacher_step);
    detail += fmt::format("; the teacher's forward {}", format_bytes(plan.teacher_forward));
    if (s.fake_score) {
      // The fake score's forward for its own loss, kept with the student's
      // graph until the one backward (its model and step are the student's).
      activations += plan.activations.total();
      detail += fmt::format("; the fake score's graph beside the student's {}", format_bytes(plan.activations.total()));
    }
    activations = std::max(activations, plan.teacher_forward);
  }
  if (s.zero_stage == 3 && s.zero_shards > 1 && !lora) {
    // Validation and the training sample gather the whole model (beyond the
    // units the step holds) and run a forward without gradients; the
    // sample's on whole sequences, on rank 0.
    const auto units = trained_units(s);
    const double gather_bytes = s.gather_dtype == at::kFloat ? 4 : 2;
    const double whole = 4 * units.root + (units.total - units.root) * gather_bytes;
    const double in_step = 4 * units.root + 3 * units.block * gather_bytes;
    auto forward = step;
    forward.sequence_parallel = 1;
    const double evaluation = whole - in_step + inference_memory(s.model, forward);
    detail += fmt::format("; validation and the sample gather the whole model ({}) for a forward: {}",
                          format_bytes(whole), format_bytes(evaluation));
    activations = std::max(activations, evaluation);
  }
  return activations;
}
}  // namespace

MemoryPlan plan_memory(const MemoryPlanSettings& s) {
  MemoryPlan plan;
  auto add = [&](std::string name, std::string detail, double bytes, bool on_device) {
    plan.items.push_back({std::move(name), std::move(detail), bytes, on_device});
  };
  const bool dev = s.on_device;
  add("runtime", "this process before the model: libraries, MPI, threads (measured)", s.runtime_bytes, false);

  const bool lora = s.lora.rank > 0;
  const bool branch = !lora && s.vace_branch_only;
  const auto weights = model_bytes(s.model, lora ? s.base_dtype : at::kFloat, s.lora);
  const double trained = lora ? 4 * double(weights.adapters) : branch ? weights.vace_branch : weights.fp32;
  // ZeRO-3: this rank's slices, and the units gathered at once (the root and 3 blocks).
  const auto units = trained_units(s);
  const double zero3_gathered = 4 * units.root + 3 * units.block * (s.gather_dtype == at::kFloat ? 4 : 2);
  const double zero3_bytes = trained / std::max(1, s.zero_shards) + zero3_gathered;
  const auto zero3_parameters = [&](int64_t count, const std::string& what) {
    return fmt::format(
        "{}{} parameters, fp32, this rank's 1/{} (ZeRO-3); gathered: the root in fp32 and 3 blocks "
        "in {} ({})",
        count, what, s.zero_shards, s.gather_dtype == at::kFloat ? "fp32" : "bf16", format_bytes(zero3_gathered));
  };
  if (lora || branch) {
    const auto swapped = swapped_bytes(s, weights);
    const int64_t frozen = parameter_count(s.model) - (branch ? vace_branch_parameter_count(s.model) : 0);
    add("frozen base",
        branch ? fmt::format("{} parameters outside the VACE branch, fp32", frozen)
               : fmt::format("{} parameters, block Linears in {}", frozen,
                             s.base_dtype == at::kFloat8_e4m3fn ? "fp8 (e4m3, an fp32 scale per 64 inputs of a row)"
                                                                : train::precision_name(s.base_dtype)),
        weights.held - (branch ? weights.vace_branch : 0) - swapped.off_device, dev);
    if (s.blocks_to_swap > 0)
      add("swapped blocks",
          fmt::format("blocks 0 to {}{}'s frozen weights in host memory; 2 of them on the device at once",
                      swapped.blocks - 1,
                      swapped.vace_blocks > 0 ? fmt::format(" and VACE blocks 0 to {}", swapped.vace_blocks - 1)
                                              : std::string()),
          swapped.host, false);
    // Each product dequantises its layer: an fp32 then a bf16 copy of the largest, one at a time.
    if (s.base_dtype == at::kFloat8_e4m3fn)
      add("fp8 working copy", "the largest block Linear dequantised for its product (fp32, then bf16)",
          6 * weights.largest_linear, dev);
    if (lora)
      add("parameters", fmt::format("{} LoRA adapter parameters (rank {}), fp32", weights.adapters, s.lora.rank),
          trained, dev);
    else if (s.zero_stage == 3 && s.zero_shards > 1)
      add("parameters", zero3_parameters(vace_branch_parameter_count(s.model), " VACE branch"), zero3_bytes, dev);
    else
      add("parameters", fmt::format("{} VACE branch parameters, fp32", vace_branch_parameter_count(s.model)), trained,
          dev);
  } else if (s.zero_stage == 3 && s.zero_shards > 1) {
    add("parameters", zero3_parameters(parameter_count(s.model), ""), zero3_bytes, dev);
  } else {
    add("parameters", fmt::format("{} parameters, fp32", parameter_count(s.model)), trained, dev);
  }
  const double shards = std::max(1, s.zero_shards);
  const std::string share =
      shards > 1 ? fmt::format(", this rank's 1/{} (ZeRO-{})", s.zero_shards, std::max(1, s.zero_stage)) : "";
  const bool narrow_comm = s.grad_comm_dtype != at::kFloat;  // a 16-bit copy of each bucket, and of the slice
  const std::string copies = narrow_comm ? ", with their 16-bit copies for the reduction" : "";
  const double comm_factor = narrow_comm ? 1.5 : 1.0;
  // A trained group's gradients (the student's, a fake score's): `trained`
  // fp32 bytes of `config`'s parameters, `small` for adapters or a branch
  // (buckets of at most bucket_bytes), else the model's largest buckets, or
  // with ZeRO-3 its units `group_units`.
  // `adapters`: LoRA's, in buckets even under ZeRO-3.
  const auto gradients_of = [&](double trained, bool small, bool adapters, const WanConfig& config,
                                const Units& group_units) {
    std::pair<double, std::string> g;
    if (shards > 1 && s.zero_stage >= 2) {
      // The slices summed over micro-steps (fp32), and the buckets alive at
      // once, in the wire dtype, each with the slice it receives (ZeRO-3: the
      // buckets are the units).
      const int alive = s.buckets_in_flight + 1;
      double buckets = 0;
      if (s.zero_stage == 3 && !adapters) {
        for (int i = 0; i < alive && i < int(group_units.runs.size()); ++i) buckets += 4 * group_units.runs[size_t(i)];
      } else {
        buckets = small ? std::min(trained, alive * s.bucket_bytes)
                        : std::min(trained, largest_buckets(config, s.bucket_bytes, alive));
      }
      const double in_flight = buckets * (narrow_comm ? 0.5 : 1.0) * (1 + 1 / shards);
      g = {trained / shards + in_flight,
           fmt::format("fp32, this rank's 1/{} (ZeRO-{}), and the {} largest {} at once while they reduce "
                       "({}{})",
                       s.zero_shards, s.zero_stage, alive, s.zero_stage == 3 && !adapters ? "units" : "buckets",
                       format_bytes(buckets), narrow_comm ? ", 16-bit" : "")};
    } else if (shards > 1) {
      g = {trained * (1 + 1 / shards) * comm_factor,
           fmt::format("fp32, in the Reducer's buckets, and the reduced 1/{} slice{}", s.zero_shards, copies)};
    } else {
      g = {trained * comm_factor, "fp32, in the Reducer's buckets" + copies};
    }
    return g;
  };
  const auto student_gradients = gradients_of(trained, lora || branch, lora, s.model, units);
  add("gradients", student_gradients.second, student_gradients.first, dev);
  if (s.optimizer) add("optimizer", "AdamW's two moments, fp32" + share, 2 * trained / shards, dev);
  if (s.ema) add("EMA", "averaged weights, fp32" + share, trained / shards, dev);
  if (s.teacher) {
    // Loaded on the host in its precision, one tensor at a time, then moved.
    const double held = teacher_bytes(*s.teacher, s.teacher_bf16);
    plan.startup_host_bytes = s.runtime_bytes + held;
    const double shared = s.teacher_shares_base ? teacher_bytes_in_base(*s.teacher, s.teacher_bf16, s.base_dtype) : 0;
    add("teacher",
        fmt::format("{} parameters, {}, loaded in that precision one tensor at a time{}", parameter_count(*s.teacher),
                    s.teacher_bf16 ? "Linears in bf16" : "fp32",
                    shared > 0 ? fmt::format("; {} of it held once, as the LoRA base", format_bytes(shared)) : ""),
        held - shared, dev);
  }
  if (s.fake_score && s.teacher) {
    // Distribution matching's fake score, a trained group of its own (no
    // EMA) counted as the student's group is: whole, the teacher's config
    // trained in full (sharded by ZeRO, gathered by its own units under
    // ZeRO-3); or LoRA adapters whose frozen base is the teacher's tensors.
    const bool adapters = s.fake_score_lora_rank > 0;
    LoraOptions lora_options;
    lora_options.rank = s.fake_score_lora_rank;
    const auto fake_model = model_bytes(*s.teacher, at::kFloat, lora_options);
    const double fake = adapters ? 4 * double(fake_model.adapters) : fake_model.fp32;
    const auto fake_units = model_units(*s.teacher);
    double weights_bytes = fake;
    if (!adapters && shards > 1 && s.zero_stage == 3)
      weights_bytes =
          fake / shards + 4 * fake_units.root + 3 * fake_units.block * (s.gather_dtype == at::kFloat ? 4 : 2);
    const auto fake_gradients = gradients_of(fake, adapters, adapters, *s.teacher, fake_units);
    // A bf16 teacher holds its text embedding's Linears in bf16, the base
    // keeps them in fp32 (as a LoRA student's does): those the base holds itself.
    double own = 0;
    if (adapters && s.teacher_bf16)
      for (const auto& [name, shape] : parameter_shapes(*s.teacher))
        if (name.rfind("text_embedding.", 0) == 0) own += 4 * double(element_count(shape));
    add("fake score",
        fmt::format("{} (distribution matching), fp32: weights{}; AdamW's moments{} (no EMA); gradients {}",
                    adapters
                        ? fmt::format("{} LoRA adapter parameters (rank {}) on the teacher's tensors{}",
                                      fake_model.adapters, s.fake_score_lora_rank,
                                      own > 0 ? fmt::format(" (its fp32 text embedding its own, {})", format_bytes(own))
                                              : std::string())
                        : fmt::format("{} parameters trained in full", parameter_count(*s.teacher)),
                    !adapters && shards > 1 && s.zero_stage == 3 ? share : "", s.optimizer ? share : " (none)",
                    fake_gradients.second),
        weights_bytes + own + fake_gradients.first + (s.optimizer ? 2 * fake / shards : 0), dev);
  }
  if (s.sample_bytes > 0)
    add("data",
        fmt::format("{} batches of {} in the loader, with their noise{}{}", s.prefetch + 1, s.step.batch,
                    s.loader_shapes > 1 ? fmt::format(", for each of {} shapes", s.loader_shapes) : "",
                    s.staged_bytes > 0 ? ", and one as stored before conversion" : ""),
        double(s.step.batch) * (double(s.prefetch + 1) * s.sample_bytes + s.staged_bytes), false);
  // The writer's copy: rank 0's weights, and each rank's (share of) the state.
  const double state_copy = trained * ((s.optimizer ? 2 : 0) + (s.ema ? 1 : 0)) / shards;
  if (s.checkpoint_snapshot)
    add("checkpoint copy",
        shards > 1 ? "the weights and this rank's share of the state, copied for the writer thread (rank 0)"
                   : "the trained state copied for the writer thread (rank 0)",
        trained + state_copy, false);
  else if (shards > 1)
    add("checkpoint copy", "this rank's share of the state, copied for its shard writer", state_copy, false);

  std::string detail;
  const double activations = plan_activations(s, plan, detail);
  if (s.prompt_video_bytes > 0)
    add("prompt videos", "the VAE and its decode of the largest prompt's frame, at each draw (--sample-prompts)",
        s.prompt_video_bytes, dev);
  add("activations", detail, activations, dev);
  if (plan.activations.offloaded > 0)
    add("offloaded inputs", "the checkpointed blocks' inputs in host memory, brought back one block ahead",
        plan.activations.offloaded, false);
  if (s.prompt_t5_bytes > 0 && !dev)  // on a GPU umT5 is alone on the device at start-up
    plan.startup_host_bytes = std::max(plan.startup_host_bytes, s.runtime_bytes + s.prompt_t5_bytes);
  return plan;
}

std::optional<SwapSuggestion> smallest_blocks_to_swap(MemoryPlanSettings s, double device_bytes) {
  if (s.lora.rank == 0 && !s.vace_branch_only) return std::nullopt;
  // A LoRA run swaps the VACE blocks too, after the base's.
  const int64_t swappable = s.model.num_layers + (s.lora.rank > 0 ? int64_t(s.model.vace_layers.size()) : 0);
  for (int64_t n = s.blocks_to_swap + 1; n <= swappable; ++n) {
    s.blocks_to_swap = n;
    const double device = plan_memory(s).device_total();
    if (device <= device_bytes) return SwapSuggestion{n, device};
  }
  return std::nullopt;
}

std::string MemoryPlan::describe() const {
  std::string out = "memory plan per rank:\n";
  for (const auto& item : items)
    if (item.bytes > 0) out += fmt::format("  {:<16} {:>10}  {}\n", item.name, format_bytes(item.bytes), item.detail);
  const bool checkpointing = activations.blocks_checkpointed > 0;
  out += fmt::format("  {:<16} {:>10}  activations {}\n", "", format_bytes(alternative.total()),
                     checkpointing ? "without checkpointing" : "with every block checkpointed");
  const double device = device_total();
  if (device > 0)
    out += fmt::format("  {:<16} {:>10}  on the GPU; {} on the host\n", "total", format_bytes(device),
                       format_bytes(host_total()));
  else
    out += fmt::format("  {:<16} {:>10}\n", "total", format_bytes(total()));
  return out;
}

double host_per_node(const MemoryPlan& root, const MemoryPlan& other, int ranks_on_host) {
  auto need = [](const MemoryPlan& p) { return std::max(p.host_total(), p.startup_host_bytes); };
  return need(root) + double(std::max(ranks_on_host, 1) - 1) * need(other);
}

namespace {

const char* kFittingAJob = "(docs/training.md, \"Fitting a job\")";

std::string ranks_text(int ranks) { return ranks == 1 ? "1 rank" : fmt::format("{} ranks", ranks); }

}  // namespace

std::string describe_limits(const MemoryPlan& root, const MemoryPlan& other, const MemoryLimits& limits) {
  std::string out;
  const double device = std::max(root.device_total(), other.device_total());
  if (limits.gpu_plan)
    out += fmt::format("  {:<16} {:>10}  each GPU: {}\n", "capacity",
                       limits.device_bytes ? format_bytes(*limits.device_bytes) : std::string("unknown"),
                       limits.device_source);
  out += fmt::format("  {:<16} {:>10}  this node's memory, shared by {} on it\n", "host",
                     format_bytes(limits.host_bytes), ranks_text(limits.ranks_on_host));
  if (limits.gpu_plan)
    out += fmt::format("  {:<16} {:>10}  {}\n", "on each GPU", format_bytes(device),
                       !limits.device_bytes ? std::string("not compared: the GPU's memory is unknown")
                       : device <= *limits.device_bytes
                           ? fmt::format("fits in {}", format_bytes(*limits.device_bytes))
                           : fmt::format("does not fit in {}", format_bytes(*limits.device_bytes)));
  const double node = host_per_node(root, other, limits.ranks_on_host);
  out += fmt::format("  {:<16} {:>10}  {}: {} this node's {}\n", "host per node", format_bytes(node),
                     limits.ranks_on_host == 1 ? std::string("its 1 rank")
                                               : fmt::format("its {} ranks together", limits.ranks_on_host),
                     node <= limits.host_bytes ? "fits in" : "does not fit in", format_bytes(limits.host_bytes));
  return out;
}

std::vector<std::string> memory_warnings(const MemoryPlan& root, const MemoryPlan& other, const MemoryLimits& limits) {
  std::vector<std::string> warnings;
  const double node = host_per_node(root, other, limits.ranks_on_host);
  if (node > limits.host_bytes)
    warnings.push_back(fmt::format(
        "the memory plan needs {} of host memory on this node ({} on it), more than its {} {}", format_bytes(node),
        ranks_text(limits.ranks_on_host), format_bytes(limits.host_bytes), kFittingAJob));
  const double device = std::max(root.device_total(), other.device_total());
  if (limits.gpu_plan && limits.device_bytes && device > *limits.device_bytes)
    warnings.push_back(fmt::format("the memory plan needs {} on each GPU, more than its {} ({}) {}",
                                   format_bytes(device), format_bytes(*limits.device_bytes), limits.device_source,
                                   kFittingAJob));
  return warnings;
}

}  // namespace wt::wan
