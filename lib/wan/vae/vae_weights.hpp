// The Wan2.1 VAE's weights from the files they are published in, by the
// official names of wan_vae.hpp:
//   - the released Wan2.1_VAE.pth (torch.save of WanVAE_'s state dict, fp32),
//     read by io::PthFile, which runs no code from it;
//   - ComfyUI's repackaged safetensors (wan_2.1_vae.safetensors, official
//     names, fp32, fp16 or bf16);
//   - the diffusers AutoencoderKLWan layout (the diffusers-format Wan
//     repositories' vae/diffusion_pytorch_model.safetensors), mapped:
//
//   quant_conv / post_quant_conv                  -> conv1 / conv2
//   {en,de}coder.conv_in / norm_out / conv_out    -> {en,de}coder.conv1 / head.0 / head.2
//   {en,de}coder.mid_block.resnets.0 / attentions.0 / resnets.1
//                                                 -> {en,de}coder.middle.0 / .1 / .2
//   encoder.down_blocks.N                         -> encoder.downsamples.N (the same flat list)
//   decoder.up_blocks.I.resnets.J / upsamplers.0  -> decoder.upsamples.N, N counting the resnets and
//                                                    upsamplers of the blocks before I (as the file holds
//                                                    them), then J / the number of block I's resnets
//   in a residual block: norm1.gamma, conv1, norm2.gamma, conv2, conv_shortcut
//                                                 -> residual.0.gamma, residual.2, residual.3.gamma,
//                                                    residual.6, shortcut
// (attention blocks and resamples keep their names: norm, to_qkv, proj, resample.1, time_conv).
// diffusers' up blocks hold no attention, as the released VAE has none there.
//
// Wan2.2's VAE (wan22_vae.hpp) in diffusers' layout (AutoencoderKLWan with
// is_residual, told apart by its names) maps the same way but for its levels,
// each one block of resnets and a resampler:
//   encoder.down_blocks.I.resnets.J / downsampler -> encoder.downsamples.I.downsamples.J / .R
//   decoder.up_blocks.I.resnets.J / upsampler     -> decoder.upsamples.I.upsamples.J / .R
// with R the level's number of resnets.
#pragma once

#include <string>

#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

// A .pth, a safetensors file or an index in the official or diffusers names,
// as a TensorSource in the official names; UsageError as open_weights.
TensorSource open_vae_weights(const std::string& path);

}  // namespace wt::wan
