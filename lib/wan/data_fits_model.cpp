#include "wantrain/wan/data_fits_model.hpp"

#include <fmt/format.h>

#include "wantrain/data/dataset.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {

void check_data_fits_model(const data::SampleShape& s, const std::string& data_dir, const WanConfig& c,
                           const std::string& config_path) {
  auto fail = [&](const std::string& what) {
    throw UsageError(fmt::format("data {} does not fit model config {}: {}", data_dir, config_path, what));
  };
  if (s.channels != c.in_dim) fail(fmt::format("latents have {} channels, in_dim is {}", s.channels, c.in_dim));
  if (c.out_dim != c.in_dim)
    fail(fmt::format("out_dim {} differs from in_dim {}: the flow-matching target has in_dim channels", c.out_dim,
                     c.in_dim));
  if (s.text_dim != c.text_dim) fail(fmt::format("text_emb has width {}, text_dim is {}", s.text_dim, c.text_dim));
  if (s.text_len > c.text_len)
    fail(fmt::format("text_emb has {} positions, more than text_len {}", s.text_len, c.text_len));
  const int64_t sizes[3] = {s.frames, s.height, s.width};
  static constexpr const char* kAxis[3] = {"frames", "height", "width"};
  for (int a = 0; a < 3; ++a)
    if (sizes[a] % c.patch_size[a] != 0)
      fail(fmt::format("latent {} {} is not a multiple of patch_size {}", kAxis[a], sizes[a], c.patch_size[a]));
}

void check_data_fits_model(const data::Dataset& dataset, const WanConfig& config, const std::string& config_path) {
  const auto& buckets = dataset.buckets();
  for (const auto& bucket : buckets)
    check_data_fits_model(
        bucket.shape,
        buckets.size() == 1 ? dataset.directory() : fmt::format("{} (bucket {})", dataset.directory(), bucket.name()),
        config, config_path);
}

}  // namespace wt::wan
