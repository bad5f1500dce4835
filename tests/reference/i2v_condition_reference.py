#!/usr/bin/env python3
"""An independent PyTorch construction of the image-to-video condition y that
the official Wan2.1 pipelines hand the model beside the noisy latents
(wan/image2video.py WanI2V.generate, wan/first_last_frame2video.py
WanFLF2V.generate; Wan2.2's image2video.py builds the same y for its I2V-A14B
experts), with the VAE of vae_reference.py, for the C++ port's tests.

  i2v_condition_reference.py VAE_CONFIG.json VAE_WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors

VAE_CONFIG and VAE_WEIGHTS are as vae_reference.py takes them.
INPUTS holds "first" [3, H, W] in [-1, 1], optionally "last" [3, H, W]
(first-last-frame-to-video), and "frames": a one-element tensor (float or
integer) holding the pixel frame count F = 1 + 4k (k >= 1 with "last").
OUT gets "y" [4 + z_dim, 1 + k, H/8, W/8] (float32; H/8 being H over the
VAE's spatial factor), the mask channels first, then the latents:

  - mask: one value per pixel frame, 1 for the given frames (the first, and
    for flf2v the last), 0 for the others; the first frame's value is
    repeated 4 times in front, so the F + 3 values split evenly into
    1 + k latent frames of 4; latent frame j's four values become channels
    0..3 at latent frame j (constant over H, W). Latent frame 0 is thus 1 in
    all four channels; for flf2v the last latent frame is 1 in channel 3 only
    (its four values are pixel frames F-4..F-1).
  - latents: the VAE encoding (normalised mean, as vae_reference.encode) of
    the F-frame video [first, zeros ..., (last)]: 0 (mid grey in [-1, 1],
    not black) everywhere but the given frames.

The official pipelines also resize the picture(s) (bicubic, to the size the
area and aspect ratio give) before encoding; that is NOT reproduced here:
"first" and "last" come already at the target size, as the C++ side hands
them over. (The official FLF2V builds its mask for 81 frames whatever F is;
this follows F.)
"""
import sys

import torch

from vae_reference import check_weights, encode, load_config
from wan_reference import read_safetensors, write_safetensors


def frame_mask(frames, last, lat_h, lat_w):
    """[4, 1 + (frames - 1) / 4, lat_h, lat_w] mask channels."""
    given = torch.zeros(frames)
    given[0] = 1.0
    if last:
        given[-1] = 1.0
    padded = torch.cat([given[:1].repeat(4), given[1:]])  # F + 3 values
    per_latent = padded.view(-1, 4).transpose(0, 1)       # [4, latent frames]
    return per_latent[:, :, None, None].expand(-1, -1, lat_h, lat_w).contiguous()


def condition(cfg, p, first, last, frames):
    if frames < 1 or (frames - 1) % 4:
        sys.exit(f"i2v_condition_reference.py: frames must be 1 + 4k, not {frames}")
    if last is not None and frames < 5:
        sys.exit(f"i2v_condition_reference.py: a last frame needs at least 5 frames, not {frames}")
    _, h, w = first.shape
    video = torch.zeros(1, 3, frames, h, w)
    video[0, :, 0] = first
    if last is not None:
        video[0, :, -1] = last
    latents = encode(cfg, p, video)[0]  # [z_dim, 1 + k, h', w']
    mask = frame_mask(frames, last is not None, latents.shape[2], latents.shape[3])
    return torch.cat([mask, latents], dim=0)


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    cfg = load_config(config_path)
    p = read_safetensors(weights_path)
    check_weights(cfg, p)
    inputs = read_safetensors(inputs_path)
    frames = int(round(inputs["frames"].reshape(-1)[0].item()))
    with torch.no_grad():
        y = condition(cfg, p, inputs["first"].float(), inputs.get("last"), frames)
    write_safetensors(out_path, {"y": y})


if __name__ == "__main__":
    main()
