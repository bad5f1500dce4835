#include "export_command.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <utility>
#include <nlohmann/json.hpp>

#include "wantrain/app/float_dtype.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/wan/objective/few_step_objective.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/checkpoint_weights.hpp"
#include "wantrain/wan/model/diffusers_export.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/sample/student_sampler.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/text.hpp"

namespace wt {
namespace {

struct ExportOptions {
  bool ema = false;
  std::string out, names, dtype_name, format = "safetensors";
  std::string component =
      "transformer";  // with --format diffusers: OUT/transformer (transformer_2: A14B's low-noise expert)
  at::ScalarType dtype = at::kFloat;
  double max_shard_bytes = 5.0 * (1 << 30);
  // A few-step student's sampler, carried into the file's metadata.
  std::map<std::string, std::string> metadata;
};

wan::WeightNames weight_names(const ExportOptions& o) {
  return o.names == "diffusers" ? wan::WeightNames::Diffusers : wan::WeightNames::Official;
}

// Whole weights: one safetensors file, or a diffusers folder (OUT/transformer/).
// Returns how they were written, for the line that reports it.
std::string write_model(const wan::WanModelImpl& model, const wan::WanConfig& config, const ExportOptions& o) {
  if (o.format != "diffusers") {
    wan::save_weights(model, o.out, o.dtype, weight_names(o), o.metadata);
    return fmt::format("{} names, {}", o.names, o.dtype_name);
  }
  const auto folder = wan::save_diffusers_folder(model, config, o.out, o.dtype, o.max_shard_bytes, o.component);
  return fmt::format("a diffusers folder {} in {} shard{}, {}", folder.folder, folder.shards,
                     folder.shards == 1 ? "" : "s", o.dtype_name);
}

// The model's parameters that `include` accepts (all without it), filled
// from a checkpoint's `stored` tensors by name, which must fit them exactly.
// Returns how many were filled.
size_t fill_from_checkpoint(wan::WanModelImpl& model, const io::NamedTensors& stored, const std::string& path,
                            const std::function<bool(const at::Tensor&, const std::string&)>& include = {}) {
  io::NamedTensors into;
  for (const auto& item : model.named_parameters(true))
    if (!include || include(item.value(), item.key())) into.emplace_back(item.key(), item.value());
  ckpt::Checkpoint tensors;
  tensors.model = stored;
  ckpt::check_fits(tensors, path, into, {});
  torch::NoGradGuard no_grad;
  ckpt::copy_named(stored, into);
  return into.size();
}

// A whole model's checkpoint: its weights (or EMA) as safetensors, through
// the model, so the names are exactly its parameters' and the diffusers
// mapping is the one the loader reads back.
void export_model(const ckpt::Checkpoint& saved, const std::string& path, const wan::WanConfig& config,
                  const ExportOptions& o) {
  auto model = wan::build_model({config, at::kFloat, wan::FirstWeights::Generator}).model;  // filled below
  const size_t filled = fill_from_checkpoint(*model, o.ema ? saved.ema : saved.model, path);
  const auto written = write_model(*model, config, o);
  fmt::print("exported {} {} tensors of step {} ({}) to {}\n", filled, o.ema ? "EMA" : "model", saved.state.step,
             written, o.out);
}

// A LoRA checkpoint's adapter settings, from the run options it stores.
wan::LoraOptions lora_settings(const ckpt::Checkpoint& saved, const std::string& path) {
  const auto options = parse_json_or_discarded(saved.run_config);
  auto text = [&](const char* key) -> std::string {
    if (!options.is_object() || !options.contains(key) || !options[key].is_string())
      throw UsageError(fmt::format("checkpoint {}: its stored run options lack {}", path, key));
    return options[key].get<std::string>();
  };
  wan::LoraOptions lora;
  try {
    lora.rank = std::stoll(text("lora-rank"));
    lora.alpha = std::stod(text("lora-alpha"));
  } catch (const std::logic_error&) {
    throw UsageError(fmt::format("checkpoint {}: its stored lora-rank or lora-alpha is not a number", path));
  }
  lora.targets = split_list(text("lora-targets"));
  // Runs before --trainable stored none: every block.
  lora.vace_only = options.contains("trainable") && options["trainable"] == "vace";
  wan::check_lora_options(lora);
  return lora;
}

// A LoRA checkpoint: its adapters as a LoRA file, or with `merge_base`
// (which must be the base they were trained on) folded in as full weights.
void export_lora(const ckpt::Checkpoint& saved, const std::string& path, const wan::WanConfig& config,
                 const ExportOptions& o, const std::string& merge_base) {
  const auto lora = lora_settings(saved, path);
  const auto& adapters = o.ema ? saved.ema : saved.model;
  const std::string trained_base = saved.objective.at("lora_base");
  if (merge_base.empty()) {
    if (o.format == "diffusers")
      throw UsageError(fmt::format(
          "option --format diffusers: checkpoint {} holds LoRA adapters: a diffusers folder holds whole weights "
          "(give --merge BASE), and a LoRA file for diffusers is --names diffusers",
          path));
    wan::write_lora_file(o.out, adapters, lora, trained_base,
                         o.names == "diffusers" ? wan::LoraNames::Diffusers : wan::LoraNames::Official, o.dtype,
                         o.metadata);
    fmt::print("exported the {} LoRA adapters of step {} ({}; {} names, base {}) to {}\n", o.ema ? "EMA" : "trained",
               saved.state.step, saved.objective.at("lora"), o.names, trained_base, o.out);
    return;
  }
  // The base as the run held it (an fp32 file held in bf16 is its rounded
  // values: what the adapters were trained on and the checksum names).
  // An fp8 base's adapters fold into its dequantised values, in fp32.
  const auto held = saved.objective.find("lora_base_precision");
  const std::string base_precision = held == saved.objective.end() ? "fp32" : held->second;
  // A run's --init may be a checkpoint's whole model; read one tensor at a time either way.
  wan::ModelRecipe base{config, app::float_dtype(base_precision), wan::FirstWeights::None};
  base.weights = wan::ModelWeights{merge_base, /*prefer_ema=*/false};
  auto model = wan::build_model(base).model;
  if (const auto checksum = wan::held_weights_checksum(config, *model); checksum != trained_base)
    throw UsageError(
        fmt::format("option --merge: {} has checksum {}, but the adapters of checkpoint {} were trained "
                    "on {}",
                    merge_base, checksum, path, trained_base));
  // merge_lora sums base + scale B A in fp32 and rounds once into the
  // weight's dtype: a bf16 base written as bf16 needs no fp32 copy of it.
  if (base_precision == "fp8") wan::dequantize_fp8_linears(*model, torch::kFloat32);
  if (o.dtype != at::kBFloat16) model->to(torch::kFloat32);
  wan::add_lora(*model, lora);
  fill_from_checkpoint(*model, adapters, path,
                       [](const at::Tensor& parameter, const std::string&) { return parameter.requires_grad(); });
  wan::merge_lora(*model);
  const auto written = write_model(*model, config, o);
  fmt::print("exported {} with the {} LoRA adapters of step {} folded in ({}) to {}\n", merge_base,
             o.ema ? "EMA" : "trained", saved.state.step, written, o.out);
}

// A VACE branch trained alone: with `merge_base` (the base it was trained
// on, a VACE model's or a text-to-video model's weights) the whole model.
void export_vace_branch(const ckpt::Checkpoint& saved, const std::string& path, const wan::WanConfig& config,
                        const ExportOptions& o, const std::string& merge_base) {
  const std::string trained_base = saved.objective.at("vace_base");
  if (merge_base.empty())
    throw UsageError(fmt::format(
        "checkpoint {} holds a VACE branch trained alone (on base {}): give --merge BASE, the weights it was "
        "trained on (the run's --init), to export the whole model",
        path, trained_base));
  // A text-to-video base's branch is drawn, then replaced by the trained one.
  wan::ModelRecipe base{config, at::kFloat, wan::FirstWeights::Generator};
  base.weights = wan::ModelWeights{merge_base, /*prefer_ema=*/false};
  auto model = wan::build_model(base).model;
  if (const auto checksum = wan::vace_base_checksum(config, *model); checksum != trained_base)
    throw UsageError(fmt::format(
        "option --merge: {} has checksum {} outside the VACE branch, but the branch of checkpoint {} was trained on "
        "{}",
        merge_base, checksum, path, trained_base));
  const size_t branch =
      fill_from_checkpoint(*model, o.ema ? saved.ema : saved.model, path,
                           [](const at::Tensor&, const std::string& name) { return wan::in_vace_branch(name); });
  const auto written = write_model(*model, config, o);
  fmt::print("exported {} with the {} VACE branch of step {} ({} tensors) in it ({}) to {}\n", merge_base,
             o.ema ? "EMA" : "trained", saved.state.step, branch, written, o.out);
}

// No checkpoint: the weights a fresh run with --seed starts from (Wan's
// initialisation), e.g. a stand-in base of a real config's size where no
// released weights can be had. With --dtype bf16 the blocks' Linears are
// built in bf16, so a real size never exists in fp32 here either.
// With `stand_in` the output head, zero in Wan's initialisation (so no
// block reaches the output and a LoRA on such a base learns nothing), is
// drawn as Xavier uniform too: a base whose blocks all matter (and so are a
// VACE model's before_proj and after_proj, zero there too).
void export_seed(const std::string& config_path, uint64_t seed, bool stand_in, const ExportOptions& o) {
  const auto config = wan::load_model_config(config_path);
  auto model =
      wan::build_model({config, o.dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat, wan::FirstWeights::Seed, seed})
          .model;
  if (stand_in) {
    torch::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(model->head->head->weight);
    if (model->vace_blocks)
      for (const auto& block : *model->vace_blocks) {
        auto& vace = *block->as<wan::VaceBlockImpl>();
        for (auto* proj : {vace.before_proj ? vace.before_proj.get() : nullptr, vace.after_proj.get()})
          if (proj) {
            const double bound = std::sqrt(3.0) * std::sqrt(2.0 / double(proj->weight.size(0) + proj->weight.size(1)));
            proj->fill_weight_uniform(-bound, bound);
          }
      }
  }
  const auto written = write_model(*model, config, o);
  fmt::print("exported the initial weights of seed {}{} for {} ({} parameters; {}) to {}\n", seed,
             stand_in ? " with a random head" : "", config_path, wan::parameter_count(config), written, o.out);
}

// One checkpoint, read from `checkpoint_path` (without its optimizer state):
// a whole model's weights, or a LoRA run's adapters (or, with `merge`, full
// weights with them folded in).
void export_checkpoint(ckpt::Checkpoint saved, const std::string& checkpoint_path, ExportOptions o,
                       const std::string& merge, const std::string& model_config_out) {
  // Only the model's groups: a distribution-matching student's checkpoint
  // also holds its fake score, training state that is never exported.
  wan::refuse_ungrouped_distribution_matching(checkpoint_path, saved.groups_recorded);
  saved.model = ckpt::model_weights(saved.model, saved.groups);
  saved.ema = ckpt::model_weights(saved.ema, saved.groups);
  const bool is_lora = saved.objective.count("lora") > 0;
  const bool is_vace_branch = saved.objective.count("vace_base") > 0;
  if (!merge.empty() && !is_lora && !is_vace_branch)
    throw UsageError(fmt::format(
        "option --merge: checkpoint {} holds a whole model, not LoRA adapters or a VACE branch", checkpoint_path));
  if (o.ema && saved.ema.empty())
    throw UsageError(
        fmt::format("option --ema: checkpoint {} has no EMA (trained without --ema-decay)", checkpoint_path));
  const auto config = wan::parse_model_config(saved.model_config, checkpoint_path + " attribute model_config");
  o.metadata = wan::student_sampler_fields(saved.objective);
  if (is_lora) {
    export_lora(saved, checkpoint_path, config, o, merge);
  } else if (is_vace_branch) {
    export_vace_branch(saved, checkpoint_path, config, o, merge);
  } else {
    export_model(saved, checkpoint_path, config, o);
  }
  if (!model_config_out.empty()) {
    std::ofstream file(model_config_out);
    file << wan::to_json(config) << '\n';
    if (!file) throw Error(fmt::format("{}: cannot write", model_config_out));
  }
}

// A --experts run's directory (experts.json): each expert's latest
// checkpoint, whole weights as the release's folders (OUT/high_noise_model/
// with config.json and diffusion_pytorch_model.safetensors), LoRA adapters
// as one file per expert (OUT/high_noise_model.safetensors), as wansample's
// --high-noise/--low-noise and --lora-high/--lora-low take them; with
// --format diffusers, a WanPipeline's transformer/ (high) and transformer_2/
// (low) with model_index.json's boundary_ratio.
void export_experts(const std::string& run, const ExportOptions& o, const std::string& merge,
                    const std::string& model_config_out) {
  const auto file = run + "/experts.json";
  const auto layout = parse_json_or_discarded(read_whole_file(file));
  if (!layout.is_object() || !layout.contains("groups") || !layout["groups"].is_array())
    throw UsageError(fmt::format("{}: not the experts.json of a wantrain --experts run", file));
  if (!merge.empty() || !model_config_out.empty())
    throw UsageError(
        fmt::format("option --{}: not for the two experts of {}: export each expert's checkpoint "
                    "({}/high_noise_model/latest) with its own",
                    merge.empty() ? "model-config-out" : "merge", run, run));
  // Both experts, each once: a pipeline of one expert is not the model (issue 80).
  std::vector<std::string> folders;
  for (const auto& group : layout["groups"]) {
    const std::string folder = group.is_object() && group.contains("folder") && group["folder"].is_string()
                                   ? group["folder"].get<std::string>()
                                   : std::string();
    if (folder != "high_noise_model" && folder != "low_noise_model")
      throw UsageError(
          fmt::format("{}: an expert's folder is {}, not high_noise_model or low_noise_model", file, group.dump()));
    folders.push_back(folder);
  }
  std::sort(folders.begin(), folders.end());
  if (folders != std::vector<std::string>{"high_noise_model", "low_noise_model"})
    throw UsageError(
        fmt::format("{}: \"groups\" names {}: a --experts run has two, high_noise_model and "
                    "low_noise_model, each once",
                    file, layout["groups"].dump()));
  // Each expert's checkpoint, found before anything is written (the groups checkpoint at their own pace).
  std::map<std::string, std::string> checkpoints;
  for (const auto& folder : folders) {
    const auto latest = ckpt::linked_checkpoint(run + "/" + folder, "latest");
    if (!latest)
      throw UsageError(
          fmt::format("{}: no checkpoint of {} yet ({}/{}/latest names none): both experts are exported "
                      "together",
                      run, folder, run, folder));
    checkpoints[folder] = *latest;
  }
  std::error_code error;
  std::filesystem::create_directories(o.out, error);
  if (error) throw UsageError(fmt::format("option --out: cannot create the folder {}: {}", o.out, error.message()));
  if (o.format == "diffusers") {
    // Where the pipeline switches experts (what wansample --weights OUT reads too), written first: an export cut
    // short leaves a folder that names both experts, which no reader takes for one. The VAE, text encoder and
    // tokenizer are the release's, unchanged: copy their folders beside these to make the whole pipeline.
    const nlohmann::json index = {{"_class_name", "WanPipeline"},
                                  {"_diffusers_version", "0.42.1"},  // as its transformer folders say
                                  {"boundary_ratio", layout.value("boundary", 0.875)},
                                  {"transformer", {"diffusers", "WanTransformer3DModel"}},
                                  {"transformer_2", {"diffusers", "WanTransformer3DModel"}}};
    write_file_durably(o.out + "/model_index.json", index.dump(2) + "\n");
  }
  for (const auto& [folder, checkpoint] : checkpoints) {
    auto saved = ckpt::read_checkpoint(checkpoint, {/*optimizer=*/false, /*ema=*/o.ema});
    ExportOptions mine = o;
    if (o.format == "diffusers") {  // diffusers' WanPipeline: the high-noise expert is transformer/
      mine.component = folder == "high_noise_model" ? "transformer" : "transformer_2";
    } else if (saved.objective.count("lora") > 0) {
      mine.out = o.out + "/" + folder + ".safetensors";
    } else {
      const auto config = wan::parse_model_config(saved.model_config, checkpoint + " attribute model_config");
      const auto expert = std::filesystem::path(o.out) / folder;
      std::filesystem::create_directories(expert, error);
      if (error) throw UsageError(fmt::format("option --out: cannot create {}: {}", expert.string(), error.message()));
      // The release's config.json: the official class and Wan's keys.
      auto expert_config = nlohmann::json::parse(wan::to_json(config));
      expert_config["_class_name"] = "WanModel";
      write_file_durably((expert / "config.json").string(), expert_config.dump(2) + "\n");
      mine.out = (expert / "diffusion_pytorch_model.safetensors").string();
    }
    export_checkpoint(std::move(saved), checkpoint, mine, "", "");
  }
}

}  // namespace

int run_export(distributed::World& world, int argc, char** argv) {
  std::string config_file, checkpoint_path, dtype = "fp32", model_config_out, merge, model_config;
  double max_shard_gib = 5;
  uint64_t seed = 0;
  bool stand_in = false;
  ExportOptions o;
  o.names = "official";
  OptionSet options("wantrain export",
                    "--checkpoint step-N.h5 --out model.safetensors [options]\n       wantrain export "
                    "--model-config C.json --seed S --out base.safetensors [--dtype bf16]");
  options.group("wantrain export")
      .standard_options(&config_file)
      .add("checkpoint", &checkpoint_path,
           "wantrain checkpoint (.h5) to read; or a --experts run's output directory: both experts, into the folder "
           "--out")
      .add("model-config", &model_config,
           "instead of --checkpoint: write the initial weights a fresh run of this model config starts from")
      .add("seed", &seed, "with --model-config: the run's --seed")
      .flag("random-head", &stand_in,
            "with --model-config: draw the output head too (zero in Wan's initialisation): a stand-in base for "
            "LoRA, whose blocks all reach the output")
      .add("out", &o.out, "safetensors file to write; with --format diffusers, the folder")
      .choice("format", &o.format, {"safetensors", "diffusers"},
              "safetensors: one file; diffusers: a folder OUT/transformer/ with config.json and the weights "
              "(sharded past --max-shard-size) as diffusers' WanTransformer3DModel.from_pretrained loads them")
      .add("max-shard-size", &max_shard_gib, "with --format diffusers: GiB at most a shard")
      .flag("ema", &o.ema, "export the EMA weights instead of the trained ones")
      .choice("dtype", &dtype, {"fp32", "bf16", "fp16"}, "stored dtype")
      .choice("names", &o.names, {"official", "diffusers"}, "tensor names: official Wan, or diffusers'")
      .add("model-config-out", &model_config_out, "also write the checkpoint's model config JSON here")
      .add("merge", &merge,
           "LoRA checkpoints: write full weights, the adapters folded into this base (the run's --init); without "
           "it the adapters are written as a LoRA file. A VACE branch trained alone (--trainable vace): the whole "
           "model, the branch over this base (needed)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (checkpoint_path.empty() && model_config.empty())
    throw UsageError(
        "option --checkpoint: give the checkpoint to export, or --model-config for a seed's initial weights");
  if (!checkpoint_path.empty() && !model_config.empty())
    throw UsageError("option --model-config: give --checkpoint or --model-config, not both");
  if (seed != 0 && model_config.empty()) throw UsageError("option --seed: needs --model-config");
  if (!model_config.empty() && (o.ema || !merge.empty() || !model_config_out.empty()))
    throw UsageError("option --model-config: --ema, --merge and --model-config-out need --checkpoint");
  if (stand_in && model_config.empty()) throw UsageError("option --random-head: needs --model-config");
  if (o.out.empty()) throw UsageError("option --out: the safetensors file (or diffusers folder) to write is required");
  if (!(max_shard_gib > 0)) throw UsageError("option --max-shard-size: must be positive (GiB)");
  o.max_shard_bytes = max_shard_gib * double(1 << 30);
  if (o.format == "diffusers") o.names = "diffusers";
  if (!world.is_root()) return kExitOk;  // one writer, however it was launched
  o.dtype = app::float_dtype(dtype);
  o.dtype_name = dtype;
  if (!model_config.empty()) {
    export_seed(model_config, seed, stand_in, o);
    return kExitOk;
  }

  if (std::filesystem::is_regular_file(std::filesystem::path(checkpoint_path) / "experts.json")) {
    export_experts(checkpoint_path, o, merge, model_config_out);
    return kExitOk;
  }
  export_checkpoint(ckpt::read_checkpoint(checkpoint_path, {/*optimizer=*/false, /*ema=*/o.ema}), checkpoint_path, o,
                    merge, model_config_out);
  return kExitOk;
}

}  // namespace wt
