#!/usr/bin/env python3
"""An independent PyTorch construction of the context a VACE model reads
(Wan2.1's wan/vace.py: prepare_source's defaults and reference fitting,
vace_encode_frames, vace_encode_masks, vace_latent), with the VAE of
vae_reference.py, for the C++ port's tests.

  vace_condition_reference.py VAE_CONFIG.json VAE_WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors

INPUTS holds "size" [frames, height, width], optionally "video" [3, F, H, W]
in [-1, 1], "mask" [1, F, H, W] in [0, 1], and "ref0", "ref1", ...
[3, h, w] in [-1, 1] at any size. OUT gets "context" [2 z + 64, R + 1 + k,
H/8, W/8] (float32), R the reference count, built so:

  - no video: zeros (mid grey); no mask: ones (every pixel made);
  - a reference of another size than the video is scaled (bilinear, no
    corner alignment) by min(H/h, W/w), the sides truncated to integers,
    and pasted in the middle of a white canvas;
  - the mask binarised (> 0.5) splits the video into inactive = video where
    the mask is 0 and reactive = video where it is 1, each encoded; each
    reference encoded alone, with zeros for its reactive half;
  - the mask channels come from the mask as given (vace_encode_frames
    binarises its own copy only): latent pixel (y, x) of channel i * 8 + j
    is the pixel (8 y + i, 8 x + j); latent frame t takes pixel frame
    floor((t + 0.5) * F / T), T = (F + 3) // 4 (nearest-exact); the
    references' frames are zero;
  - the context is [references then inactive, references' zeros then
    reactive, mask channels] along the channels.
"""
import math
import sys

import torch
import torch.nn.functional as F

from vae_reference import check_weights, encode, load_config
from wan_reference import read_safetensors, write_safetensors


def fit(ref, height, width):
    if tuple(ref.shape[-2:]) == (height, width):
        return ref
    scale = min(height / ref.shape[1], width / ref.shape[2])
    h, w = int(ref.shape[1] * scale), int(ref.shape[2] * scale)
    resized = F.interpolate(ref[None], size=(h, w), mode="bilinear", align_corners=False)[0]
    canvas = torch.ones(3, height, width)
    top, left = (height - h) // 2, (width - w) // 2
    canvas[:, top:top + h, left:left + w] = resized
    return canvas


def mask_channels(mask, refs, s=8):
    frames, height, width = mask.shape[1:]
    h, w, t = height // s, width // s, (frames + 3) // 4
    out = torch.zeros(s * s, refs + t, h, w)
    for i in range(s):
        for j in range(s):
            for k in range(t):
                source = min(math.floor((k + 0.5) * frames / t), frames - 1)
                out[i * s + j, refs + k] = mask[0, source, i::s, j::s]
    return out


def context(cfg, p, frames, height, width, video, mask, refs):
    if video is None:
        video = torch.zeros(3, frames, height, width)
    if mask is None:
        mask = torch.ones(1, frames, height, width)
    made = torch.where(mask > 0.5, 1.0, 0.0)
    inactive = encode(cfg, p, (video * (1 - made))[None])[0]
    reactive = encode(cfg, p, (video * made)[None])[0]
    latents = torch.cat([inactive, reactive], dim=0)
    encoded = []
    for ref in refs:
        z = encode(cfg, p, fit(ref, height, width)[None, :, None])[0]
        encoded.append(torch.cat([z, torch.zeros_like(z)], dim=0))
    latents = torch.cat(encoded + [latents], dim=1)
    return torch.cat([latents, mask_channels(mask, len(refs))], dim=0)


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    cfg = load_config(config_path)
    p = read_safetensors(weights_path)
    check_weights(cfg, p)
    inputs = read_safetensors(inputs_path)
    frames, height, width = (int(round(v)) for v in inputs["size"].tolist())
    refs = [inputs[f"ref{i}"] for i in range(len(inputs)) if f"ref{i}" in inputs]
    with torch.no_grad():
        out = context(cfg, p, frames, height, width, inputs.get("video"), inputs.get("mask"), refs)
    write_safetensors(out_path, {"context": out})


if __name__ == "__main__":
    main()
