#include "wantrain/wan/model/checkpoint_weights.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

void refuse_ungrouped_distribution_matching(const std::string& path, bool groups_recorded) {
  if (groups_recorded) return;
  const auto objective = ckpt::read_objective(path);
  const auto method = objective.state.find("method");
  if (objective.kind == "few-step" && method != objective.state.end() && method->second == "dmd")
    throw UsageError(fmt::format(
        "checkpoint {}: a distribution-matching checkpoint written before its fake score became a parameter "
        "group of its own (/model has no groups record), so its student cannot be told from its fake score; "
        "export or resume it with the wantrain that wrote it",
        path));
}

CheckpointWeights checkpoint_weights(const std::string& path, bool prefer_ema) {
  const auto contents = ckpt::read_weights_contents(path);
  refuse_ungrouped_distribution_matching(path, contents.groups_recorded);
  // A VACE branch trained alone: the base is not in the checkpoint.
  if (const auto objective = ckpt::read_objective(path); objective.state.count("vace_base") > 0)
    throw UsageError(
        fmt::format("checkpoint {}: holds only a VACE branch trained alone (on base {}): use the run's weights file "
                    "(OUTPUT/model.safetensors, the whole model), or export the whole model from it with its base "
                    "(wantrain export --checkpoint {} --merge BASE --out FILE)",
                    path, objective.state.at("vace_base"), path));
  CheckpointWeights w;
  w.ema = prefer_ema && contents.ema;
  w.step = contents.step;
  w.source.path = path;
  // The model: the groups that are its weights (a few-step student's, not
  // its fake score), under the parameters' own names.
  struct Stored {
    std::string name;  // in the file
    bool averaged = false;
  };
  std::map<std::string, Stored> stored;
  for (const auto& [name, shape] : contents.model) {
    const auto& group = ckpt::group_of(contents.groups, name);
    if (!group.weights) continue;
    const auto own = name.substr(group.prefix.size());
    w.source.shapes.emplace(own, shape);
    stored[own] = {name, group.ema};
  }
  if (!w.ema) {
    w.source.read = [path, stored](const std::string& name) {
      return ckpt::read_weight(path, "model", stored.at(name).name);
    };
  } else if (!contents.sharded_ema) {
    w.source.read = [path, stored](const std::string& name) {
      const auto& s = stored.at(name);
      return ckpt::read_weight(path, s.averaged ? "ema" : "model", s.name);
    };
  } else {
    // A ZeRO checkpoint's EMA: each tensor gathered from the shard files.
    auto reader = std::make_shared<const ckpt::StateReader>(path);
    std::vector<std::pair<std::string, int64_t>> numels, averaged;
    for (const auto& [name, shape] : contents.model) {
      const auto& group = ckpt::group_of(contents.groups, name);
      numels.emplace_back(name, element_count(shape));
      if (group.ema) averaged.emplace_back(name, element_count(shape));
    }
    reader->check(numels, averaged);
    w.source.read = [path, reader, stored, shapes = w.source.shapes](const std::string& name) {
      const auto& s = stored.at(name);
      const auto& shape = shapes.at(name);
      if (!s.averaged) return ckpt::read_weight(path, "model", s.name);
      return reader->read(ckpt::StateReader::Kind::Ema, s.name, 0, element_count(shape)).view(shape);
    };
  }
  return w;
}

}  // namespace wt::wan
