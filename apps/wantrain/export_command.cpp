#include "export_command.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <map>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/model/model_config.hpp"
#include "wantrain/model/wan_model.hpp"
#include "wantrain/model/weights.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/app/version.hpp"

namespace wt {

int run_export(distributed::World& world, int argc, char** argv) {
  std::string config_file, checkpoint_path, out, dtype = "fp32", names = "official", model_config_out;
  bool ema = false;
  OptionSet options("wantrain export", "--checkpoint step-N.h5 --out model.safetensors [options]");
  options.group("wantrain export")
      .standard_options(&config_file)
      .add("checkpoint", &checkpoint_path, "wantrain checkpoint (.h5) to read")
      .add("out", &out, "safetensors file to write")
      .flag("ema", &ema, "export the EMA weights instead of the trained ones")
      .choice("dtype", &dtype, {"fp32", "bf16", "fp16"}, "stored dtype")
      .choice("names", &names, {"official", "diffusers"}, "tensor names: official Wan, or diffusers'")
      .add("model-config-out", &model_config_out, "also write the checkpoint's model config JSON here");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (checkpoint_path.empty()) throw UsageError("option --checkpoint: the checkpoint to export is required");
  if (out.empty()) throw UsageError("option --out: the safetensors file to write is required");
  if (!world.is_root()) return kExitOk;  // one writer, however it was launched

  const auto saved = ckpt::read_checkpoint(checkpoint_path);
  if (const auto lora = saved.objective.find("lora"); lora != saved.objective.end())
    throw UsageError(
        fmt::format("checkpoint {}: it holds LoRA adapters ({}), not a model; the run that wrote it "
                    "wrote them as lora.safetensors (docs/lora.md)",
                    checkpoint_path, lora->second));
  if (ema && saved.ema.empty())
    throw UsageError(
        fmt::format("option --ema: checkpoint {} has no EMA (trained without --ema-decay)", checkpoint_path));
  const auto config = model::parse_model_config(saved.model_config, checkpoint_path + " attribute model_config");
  // Through the model, so the names are exactly its parameters' and the
  // diffusers mapping is the one the loader reads back.
  model::WanModel model(config);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : model->named_parameters(true)) named.emplace_back(item.key(), item.value());
  ckpt::Checkpoint tensors;
  tensors.model = ema ? saved.ema : saved.model;
  ckpt::check_fits(tensors, checkpoint_path, named, false);
  std::map<std::string, at::Tensor> by_name(tensors.model.begin(), tensors.model.end());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, parameter] : named) parameter.copy_(by_name.at(name));
  }
  const auto stored = dtype == "bf16" ? at::kBFloat16 : dtype == "fp16" ? at::kHalf : at::kFloat;
  model::save_weights(*model, out, stored,
                      names == "diffusers" ? model::WeightNames::Diffusers : model::WeightNames::Official);
  if (!model_config_out.empty()) {
    std::ofstream file(model_config_out);
    file << model::to_json(config) << '\n';
    if (!file) throw Error(fmt::format("{}: cannot write", model_config_out));
  }
  fmt::print("exported {} {} tensors of step {} ({} names, {}) to {}\n", named.size(), ema ? "EMA" : "model",
             saved.state.step, names, dtype, out);
  return kExitOk;
}

}  // namespace wt
