#!/usr/bin/env python3
"""One sampling step of Wan2.2 TI2V from a picture, as the official
textimage2video.py loop takes it, with Euler as the solver (wantrain's): an
independent check of wantrain's sampler with a first frame.

The official loop, per step with timestep t:
  - the mask is 1 everywhere but the first latent frame (0 there), and the
    picture's latents z fill frame 0: latent = (1 - mask) * z + mask * latent
    (before the first step and after every step);
  - the per-token timesteps are the mask at the tokens' places (every second
    latent row and column, 2x2 patches) times t, flattened in (f, h, w) order;
  - the model's velocity with and without the text, guided:
    v = v_uncond + cfg * (v_cond - v_uncond);
  - the solver's update (here Euler: latent + (sigma_next - sigma) * v), then
    frame 0 put back.

usage: ti2v_step_reference.py CONFIG.json WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors
  INPUTS: noise [1,C,F,H,W], z [1,C,1,H,W] (the picture's latents), context
  [1,Lc,D], sigmas [2] (this step's sigma and the next), cfg [1].
  OUT: "latent" [1,C,F,H,W] after the step.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wan_reference import forward, read_safetensors, write_safetensors  # noqa: E402


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    with open(config_path) as f:
        cfg = json.load(f)
    p = read_safetensors(weights_path)
    inputs = read_safetensors(inputs_path)
    noise, z, context = inputs["noise"], inputs["z"], inputs["context"]
    sigma, sigma_next = inputs["sigmas"].double().tolist()
    guide = float(inputs["cfg"][0])
    mask = torch.ones_like(noise)
    mask[:, :, 0] = 0
    cond_term = (1 - mask) * z.expand_as(noise)
    latent = cond_term + mask * noise
    t = torch.tensor(1000.0 * sigma, dtype=torch.float32)
    patch_h, patch_w = cfg["patch_size"][1], cfg["patch_size"][2]
    per_token = (mask[0, 0][:, ::patch_h, ::patch_w] * t).flatten().unsqueeze(0)  # [1, L]
    with torch.no_grad():
        v_cond = forward(cfg, p, latent, per_token, context)
        v_uncond = forward(cfg, p, latent, per_token, torch.zeros_like(context))
    v = v_uncond + guide * (v_cond - v_uncond)
    latent = latent + (sigma_next - sigma) * v
    latent = cond_term + mask * latent
    write_safetensors(out_path, {"latent": latent})


if __name__ == "__main__":
    main()
