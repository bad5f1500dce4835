// The hyper-parameters of Wan2.1's video VAE: the arguments of the official
// constructor (wan/modules/vae.py: WanVAE_, through _video_vae, which sets
// Wan2.1's values) and the per-channel latent statistics of its WanVAE
// wrapper, read from a JSON object with those names:
//
//   {"dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
//    "attn_scales": [], "temperal_downsample": [false, true, true],
//    "latents_mean": [16 numbers], "latents_std": [16 numbers]}
//
// (`temperal_downsample` spelled as the official code spells it.) Missing
// keys keep Wan2.1's values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt::wan {

struct VaeConfig {
  int64_t dim = 96;                           // channels of the first (full-resolution) level
  int64_t z_dim = 16;                         // latent channels
  std::vector<int64_t> dim_mult{1, 2, 4, 4};  // channels of each level, times dim; 2^(levels-1) spatial factor
  int64_t num_res_blocks = 2;                 // residual blocks per encoder level (decoder: one more)
  std::vector<double> attn_scales;            // levels (1, 1/2, 1/4, ...) with attention after each residual block
  std::vector<bool> temperal_downsample{false, true, true};  // per level but the last: halve time too
  // Latents are (mu - mean) / std per channel: Wan2.1's 16 constants, or
  // 0 and 1 for another z_dim when the file gives none.
  std::vector<double> latents_mean{-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653,  -0.1517, 1.5508,
                                   0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503,  -0.2921};
  std::vector<double> latents_std{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                  3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};

  // Pixels per latent along height and width: 2^(levels-1) (Wan2.1: 8).
  int64_t spatial_factor() const;
  // Frames per latent frame after the first: 2^(temporal halvings) (Wan2.1: 4).
  int64_t temporal_factor() const;
};

// A JSON object of those keys (missing keys keep the default; "dropout",
// an official argument that inference ignores, is accepted); UsageError
// naming the file and key otherwise.
VaeConfig load_vae_config(const std::string& path);
VaeConfig parse_vae_config(const std::string& json_text, const std::string& source);

// UsageError naming `source` when the config cannot describe a Wan2.1 VAE
// (parse_vae_config checks this; the model checks a config made in code).
void check_vae_config(const VaeConfig& config, const std::string& source);

}  // namespace wt::wan
