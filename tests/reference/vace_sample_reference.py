#!/usr/bin/env python3
"""A VACE model's guided sampling loop, independent of wantrain: the context
of vace_condition_reference.py, the forward of wan_reference.py (VaceWanModel
with its vace_context and vace_context_scale), classifier-free guidance
against the all-zero text context (what wantrain's --text-drop trains), and
the flow-matching Euler step on the shifted schedule, as WanVace.generate
loops (its solvers aside); the reference pictures' latent frames are drawn
with the rest and dropped at the end, as WanVace.decode_latent drops them.

  vace_sample_reference.py MODEL_CONFIG MODEL_WEIGHTS VAE_CONFIG VAE_WEIGHTS INPUTS OUT

INPUTS holds video [3, F, H, W] and mask_video [3, F, H, W] in [-1, 1] (its
red channel brought to [0, 1] is the mask, as prepare_source reads it),
ref0, ref1, ... [3, h, w] pictures, noise [C, R + T, H/8, W/8], context
[L, text_dim], and one-element steps, cfg, shift, scale. OUT gets "latents"
[C, T, H/8, W/8]. Beside OUT, wansample's inputs: noise.h5 (/noise) and
text.h5 (/text_emb).

Euler on the shifted schedule: sigma_i = shift s / (1 + (shift - 1) s) with
s = 1 - i / steps, timestep 1000 sigma_i, x += (sigma_{i+1} - sigma_i) v,
v = uncond + cfg (cond - uncond).
"""
import json
import os
import sys

import h5py
import torch

import vace_condition_reference as vace
import wan_reference as wan
from vae_reference import check_weights, load_config


def main():
    model_config, model_weights, vae_config, vae_weights, inputs_path, out_path = sys.argv[1:7]
    with open(model_config) as f:
        cfg = json.load(f)
    p = wan.read_safetensors(model_weights)
    vcfg = load_config(vae_config)
    vp = wan.read_safetensors(vae_weights)
    check_weights(vcfg, vp)
    inputs = wan.read_safetensors(inputs_path)
    video = inputs["video"]
    mask = ((inputs["mask_video"][:1] + 1) / 2).clamp(0, 1)
    refs = [inputs[f"ref{i}"] for i in range(len(inputs)) if f"ref{i}" in inputs]
    frames, height, width = video.shape[1:]
    noise, context = inputs["noise"], inputs["context"]
    steps, guidance, shift, scale = (float(inputs[k][0]) for k in ("steps", "cfg", "shift", "scale"))
    steps = int(steps)
    with torch.no_grad():
        z = vace.context(vcfg, vp, frames, height, width, video, mask, refs)[None]
        sigmas = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / steps for i in range(steps + 1))]
        x = noise[None].clone()
        empty = torch.zeros(1, 1, context.shape[1])
        for i in range(steps):
            t = torch.tensor([1000.0 * sigmas[i]])
            cond = wan.forward(cfg, p, x, t, context[None], vace_context=z, vace_scale=scale)
            uncond = wan.forward(cfg, p, x, t, empty, vace_context=z, vace_scale=scale)
            x = x + (sigmas[i + 1] - sigmas[i]) * (uncond + guidance * (cond - uncond))
    wan.write_safetensors(out_path, {"latents": x[0, :, len(refs):]})
    write_wansample_inputs(os.path.dirname(out_path), noise, context)


def write_wansample_inputs(here, noise, context):
    """wansample's --noise HERE/noise.h5 (/noise) and --text HERE/text.h5 (/text_emb)."""
    with h5py.File(f"{here}/noise.h5", "w") as f:
        f["noise"] = noise.numpy()
    with h5py.File(f"{here}/text.h5", "w") as f:
        f["text_emb"] = context.numpy()


if __name__ == "__main__":
    main()
