#include "wantrain/wan/model/checkpoint_weights.hpp"

#include <memory>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/weight_names.hpp"

namespace wt::wan {

CheckpointWeights checkpoint_weights(const std::string& path, bool prefer_ema) {
  const auto contents = ckpt::read_weights_contents(path);
  CheckpointWeights w;
  w.ema = prefer_ema && contents.ema;
  w.step = contents.step;
  w.source.path = path;
  for (const auto& [name, shape] : contents.model)
    if (!is_fake_score_parameter(name)) w.source.shapes.emplace(name, shape);  // a few-step student's own
  if (!w.ema) {
    w.source.read = [path](const std::string& name) { return ckpt::read_weight(path, "model", name); };
  } else if (!contents.sharded_ema) {
    w.source.read = [path](const std::string& name) { return ckpt::read_weight(path, "ema", name); };
  } else {
    // A ZeRO checkpoint's EMA: each tensor gathered from the shard files.
    auto reader = std::make_shared<const ckpt::StateReader>(path);
    std::vector<std::pair<std::string, int64_t>> numels;
    for (const auto& [name, shape] : w.source.shapes) numels.emplace_back(name, element_count(shape));
    reader->check(numels, /*need_ema=*/true);
    w.source.read = [reader, shapes = w.source.shapes](const std::string& name) {
      const auto& shape = shapes.at(name);
      return reader->read(ckpt::StateReader::Kind::Ema, name, 0, element_count(shape)).view(shape);
    };
  }
  return w;
}

}  // namespace wt::wan
