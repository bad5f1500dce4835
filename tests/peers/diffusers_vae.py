#!/usr/bin/env python3
"""diffusers' own AutoencoderKLWan (Wan2.1's VAE) as the peer of wantrain's.

Builds the VAE from the diffusers config CONFIG (from_config), draws its
weights (seeded) so that every part matters and activations stay of order
1 (norms' gamma around 1, small biases, weights at unit gain, the last conv
at 0.3), saves it with save_pretrained into ROOT/vae, and runs it on INPUTS
(safetensors: video [B, 3, F, H, W] in [-1, 1], latents [B, z, f, h, w]
normalised). As WanPipeline normalises: encoded = (mode - latents_mean) /
latents_std; decoded = decode(latents * latents_std + latents_mean).
Writes `latents` and `decoded` to OUT. With `tiling` in INPUTS (tile height,
width, stride height, width) and `tiled_video`, `tiled_latents`: the same
with enable_tiling of those sizes, as `tiled_encoded` and `tiled_decoded`.

Usage: diffusers_vae.py CONFIG ROOT INPUTS OUT
"""

import json
import math
import sys

import torch

try:
    from diffusers import AutoencoderKLWan
    from safetensors.torch import load_file, save_file
except ImportError as e:
    sys.exit(f"diffusers_vae.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")


def main(config_path, root, inputs_path, out_path):
    with open(config_path) as f:
        config = json.load(f)
    vae = AutoencoderKLWan.from_config(config).eval()
    torch.manual_seed(11)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith(".gamma"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                gain = 0.3 if name == "decoder.conv_out.weight" else 1.0
                p.copy_(torch.randn_like(p) * (gain / math.sqrt(p.numel() / p.shape[0])))
    vae.save_pretrained(f"{root}/vae", safe_serialization=True)
    inputs = load_file(inputs_path)
    mean = torch.tensor(config["latents_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(config["latents_std"]).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        latents = (vae.encode(inputs["video"]).latent_dist.mode() - mean) / std
        decoded = vae.decode(inputs["latents"] * std + mean).sample
    out = {"latents": latents.contiguous(), "decoded": decoded.contiguous()}
    if "tiling" in inputs:
        h, w, sh, sw = (int(v) for v in inputs["tiling"].tolist())
        vae.enable_tiling(tile_sample_min_height=h, tile_sample_min_width=w, tile_sample_stride_height=sh,
                          tile_sample_stride_width=sw)
        with torch.no_grad():
            out["tiled_encoded"] = ((vae.encode(inputs["tiled_video"]).latent_dist.mode() - mean) / std).contiguous()
            out["tiled_decoded"] = vae.decode(inputs["tiled_latents"] * std + mean).sample.contiguous()
    save_file(out, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
