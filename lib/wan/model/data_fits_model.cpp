#include "wantrain/wan/model/data_fits_model.hpp"

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
  const int64_t latent_channels = c.in_dim - c.condition_channels();
  // 16 and 48 channels are what the Wan2.1 and Wan2.2 VAEs make: say which
  // VAE the data need.
  const auto vae_of = [](int64_t channels) {
    return channels == 16 ? std::string(" (Wan2.1's VAE)") : channels == 48 ? std::string(" (Wan2.2's VAE)") : "";
  };
  if (s.channels != latent_channels)
    fail(fmt::format("latents have {} channels{}, the model reads {}{}{}", s.channels, vae_of(s.channels),
                     latent_channels, c.image_conditioned() ? " (in_dim less the condition's)" : " (in_dim)",
                     vae_of(latent_channels).empty()
                         ? std::string()
                         : ": encode the data with the VAE of the model" + vae_of(latent_channels)));
  if (c.out_dim != latent_channels)
    fail(fmt::format("out_dim {} differs from in_dim {}: the flow-matching target has in_dim channels", c.out_dim,
                     c.in_dim));
  const char* type = model_type_name(c.model_type);
  // A V1.1 model also reads data with a reference frame (reference_frame.hpp).
  const bool reference_data = c.reference_y_channels() > 0 && s.condition_channels == c.reference_y_channels();
  // The encode option that makes this model's /y (a Fun-Control model is i2v by its config).
  const char* condition = c.fun_control_with_mask() ? "fun-control-mask"
                          : reference_data          ? "fun-control-ref"
                          : c.fun_control()         ? "fun-control"
                                                    : type;
  const char* kind = c.fun_control() ? "Fun-Control" : type;
  if (c.image_conditioned() && !s.has_condition())
    fail(
        fmt::format("the {} model needs the image condition /y in the shards: encode them with wandata encode "
                    "--condition {}",
                    kind, condition));
  if (!c.image_conditioned() && s.has_condition())
    fail(
        fmt::format("the shards hold an image condition /y that a {} model does not read: use an i2v or flf2v "
                    "model config, or data encoded without --condition",
                    type));
  if (c.image_conditioned() && s.condition_channels != c.condition_channels() && !reference_data)
    fail(fmt::format("/y has {} channels, the model reads {}{}", s.condition_channels, c.condition_channels(),
                     c.fun_control() && !c.fun_control_with_mask() && s.condition_channels == 3 * c.out_dim
                         ? std::string(" (the shards' hold a reference frame too, which a Fun-Control V1.1 model "
                                       "reads: add_ref_conv; wandata encode --condition fun-control made this model's)")
                     : c.fun_control()
                         ? fmt::format(" (a Fun-Control model's: wandata encode --condition {})", condition)
                     : s.condition_channels == 2 * c.out_dim
                         ? std::string(" (the shards' is a Fun-Control model's: wandata encode --condition fun-control "
                                       "made them)")
                     : s.condition_channels == 2 * c.out_dim + 4
                         ? std::string(" (the shards' is a Wan2.2-Fun model's: wandata encode --condition "
                                       "fun-control-mask made them)")
                         : std::string()));
  if (c.image_branch() && s.clip_tokens == 0)
    fail(
        fmt::format("the model's CLIP branch needs /clip_fea in the shards: encode them with wandata encode "
                    "--condition {} --clip FILE",
                    condition));
  const int64_t pictures = reference_data ? 2 : c.condition_images();  // the start's and the reference's
  if (c.image_branch() && (s.clip_tokens != pictures * c.image_tokens || s.clip_dim != c.image_dim))
    fail(fmt::format("/clip_fea is [{}, {}] a sample, the model reads [{}, {}] ({} picture{} of {} tokens)",
                     s.clip_tokens, s.clip_dim, pictures * c.image_tokens, c.image_dim, pictures,
                     pictures > 1 ? "s" : "", c.image_tokens));
  if (!c.image_branch() && s.clip_tokens > 0)
    fail("the shards hold CLIP features /clip_fea and the model has no CLIP branch (image_dim 0)");
  if (c.vace() && !s.has_vace())
    fail(
        "the vace model needs the VACE context /vace_context in the shards: encode them with wandata encode "
        "--condition vace");
  if (!c.vace() && s.has_vace())
    fail(
        fmt::format("the shards hold a VACE context /vace_context that a {} model does not read: use a vace model "
                    "config, or data encoded without --condition vace",
                    type));
  if (c.vace() && s.vace_channels != c.vace_in_dim)
    fail(
        fmt::format("/vace_context has {} channels, the model reads {} (vace_in_dim)", s.vace_channels, c.vace_in_dim));
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
