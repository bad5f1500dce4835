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
// keys keep Wan2.1's values. `"version": "2.1"` may say which VAE it is.
//
// The Wan2.2 VAE's (wan/modules/vae2_2.py: WanVAE_ as its Wan2_2_VAE
// wrapper builds it, the VAE of TI2V-5B) has the same keys and `dec_dim`,
// the decoder's own width:
//
//   {"version": "2.2", "dim": 160, "dec_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4],
//    "num_res_blocks": 2, "temperal_downsample": [false, true, true],
//    "latents_mean": [48 numbers], "latents_std": [48 numbers]}
//
// Which of the two a file describes: its "version" ("2.1" or "2.2"); else
// the presence of "dec_dim" (Wan2.2 only); else the VAE the weights hold
// (video_vae.hpp detects it from their tensors); else Wan2.1. A version the
// file names must be the one the weights hold.
#pragma once

#include <cstdint>
#include <optional>
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

// Wan2.2's VAE: 2x2 patches of RGB (12 channels) in and out, residual
// levels with averaged (encoder) or duplicated (decoder) shortcuts around
// their resamples, and 48 latent channels at 4x16x16 compression.
struct Vae22Config {
  int64_t dim = 160;      // encoder channels of the first level
  int64_t dec_dim = 256;  // decoder channels of the last level (its widest: dec_dim * dim_mult.back())
  int64_t z_dim = 48;     // latent channels
  std::vector<int64_t> dim_mult{1, 2, 4, 4};  // channels of each level, times dim (decoder: dec_dim, reversed)
  int64_t num_res_blocks = 2;                 // residual blocks per encoder level (decoder: one more)
  std::vector<bool> temperal_downsample{false, true, true};  // per level but the last: halve time too
  // Latents are (mu - mean) / std per channel: the Wan2_2_VAE wrapper's 48
  // constants, or 0 and 1 for another z_dim when the file gives none.
  std::vector<double> latents_mean{
      -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174,  0.1838,  0.1557,  -0.1382, 0.0542,  0.2813,  0.0891,
      0.1570,  -0.0098, 0.0375,  -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,  0.2665,  -0.2108, -0.2158, 0.2502,
      -0.2055, -0.0322, 0.1109,  0.1567,  -0.0729, 0.0899,  -0.2799, -0.1230, -0.0313, -0.1649, 0.0117,  0.0723,
      -0.2839, -0.2083, -0.0520, 0.3748,  0.0152,  0.1957,  0.1433,  -0.2944, 0.3573,  -0.0548, -0.1681, -0.0667};
  std::vector<double> latents_std{0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344,
                                  0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804,
                                  0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999,
                                  0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
                                  0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744};

  // Pixels per latent along height and width: 2 (the patches) x 2^(levels-1) (Wan2.2: 16).
  int64_t spatial_factor() const;
  // Frames per latent frame after the first: 2^(temporal halvings) (Wan2.2: 4).
  int64_t temporal_factor() const;
};

// As parse_vae_config, for Wan2.2's keys ("attn_scales", which the official
// Wan2.2 VAE takes and ignores, only as an empty list).
Vae22Config parse_vae22_config(const std::string& json_text, const std::string& source);
// UsageError naming `source` when the config cannot describe a Wan2.2 VAE:
// besides the checks of Wan2.1's, every level's shortcut must split its
// channels evenly (the encoder averages in x 2^time x 4 values into each of
// out channels, the decoder spreads in over out x 2^time x 4).
void check_vae22_config(const Vae22Config& config, const std::string& source);

enum class VaeVersion { Wan21, Wan22 };
const char* vae_version_name(VaeVersion version);  // "Wan2.1", "Wan2.2"

// Either VAE's shape: what video_vae.hpp's factory builds.
struct VideoVaeConfig {
  VaeVersion version = VaeVersion::Wan21;
  VaeConfig wan21;    // when version is Wan21
  Vae22Config wan22;  // when version is Wan22

  int64_t z_dim() const;
  int64_t spatial_factor() const;
  int64_t temporal_factor() const;
  // "Wan2.2 VAE (48 channels, 4x16x16)"
  std::string description() const;
};

// A config file of either VAE; `weights`: the VAE the weights hold (when
// known; `weights_source` names them), which decides where the file does not
// (see the top of this file) and must agree where it does. UsageError naming
// the file and key.
VideoVaeConfig parse_video_vae_config(const std::string& json_text, const std::string& source,
                                      std::optional<VaeVersion> weights = std::nullopt,
                                      const std::string& weights_source = "the weights");
VideoVaeConfig load_video_vae_config(const std::string& path, std::optional<VaeVersion> weights = std::nullopt,
                                     const std::string& weights_source = "the weights");

}  // namespace wt::wan
