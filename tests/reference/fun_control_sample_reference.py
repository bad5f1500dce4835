#!/usr/bin/env python3
"""A Fun-Control model's guided sampling loop, independent of wantrain,
written from VideoX-Fun's videox_fun/pipeline/pipeline_wan_fun_control.py
(Wan2.1-Fun-Control V1.0 and V1.1): the condition built as its __call__
builds it, the forward of wan_reference.py (an i2v model of in_dim 3 out_dim,
with ref_conv for V1.1), classifier-free guidance in which only the text
differs (the all-zero text context here, what wantrain's --text-drop
trains), and the flow-matching Euler step on Wan's shifted schedule.

  fun_control_sample_reference.py MODEL_CONFIG MODEL_WEIGHTS VAE_CONFIG VAE_WEIGHTS CLIP_CONFIG CLIP_WEIGHTS INPUTS OUT

INPUTS holds control [3, F, H, W], start [3, H, W] and ref [3, H, W] in
[-1, 1] at the sample's size (each optional), noise [C, T, H/8, W/8],
context [L, text_dim], and one-element steps, cfg, shift. OUT gets
"latents" [C, T, H/8, W/8]. Beside OUT, wansample's inputs: noise.h5
(/noise) and text.h5 (/text_emb).

The condition, as the pipeline builds it:
  - control latents: the control video through the VAE (its mode: the
    mean), zeros without one;
  - start latents: zeros like the latents, the start picture alone through
    the VAE in latent frame 0 (only when there is more than one latent
    frame); all zeros without one;
  - y = [control latents, start latents] on the channels;
  - CLIP features: of the reference picture if given, else of the start
    picture, else zeros of their shape;
  - full_ref (add_ref_conv models): the reference picture alone through the
    VAE, its one latent frame; zeros without one;
  - guidance: y, CLIP features and full_ref the same in both branches.
Euler: sigma_i = shift s / (1 + (shift - 1) s) with s = 1 - i / steps,
timestep 1000 sigma_i, x += (sigma_{i+1} - sigma_i) v,
v = uncond + cfg (cond - uncond).
"""
import json
import os
import sys

import torch

import clip_reference as clip
import wan_reference as wan
from vace_sample_reference import write_wansample_inputs
from vae_reference import check_weights, encode, load_config


def main():
    (model_config, model_weights, vae_config, vae_weights, clip_config, clip_weights, inputs_path,
     out_path) = sys.argv[1:9]
    with open(model_config) as f:
        cfg = json.load(f)
    p = wan.read_safetensors(model_weights)
    vcfg = load_config(vae_config)
    vp = wan.read_safetensors(vae_weights)
    check_weights(vcfg, vp)
    ccfg = clip.load_config(clip_config)
    cp = wan.read_safetensors(clip_weights)
    inputs = wan.read_safetensors(inputs_path)
    noise, context = inputs["noise"], inputs["context"]
    steps, guidance, shift = (float(inputs[k][0]) for k in ("steps", "cfg", "shift"))
    steps = int(steps)
    control, start, ref = inputs.get("control"), inputs.get("start"), inputs.get("ref")
    with torch.no_grad():
        latents_shape = (1,) + tuple(noise.shape)
        control_latents = encode(vcfg, vp, control[None]) if control is not None else torch.zeros(latents_shape)
        start_latents = torch.zeros(latents_shape)
        if start is not None and latents_shape[2] != 1:
            start_latents[:, :, :1] = encode(vcfg, vp, start[None, :, None])
        y = torch.cat([control_latents, start_latents], dim=1)
        picture = ref if ref is not None else start
        tokens = (ccfg["image_size"] // ccfg["patch_size"]) ** 2 + 1
        clip_fea = (clip.features(ccfg, cp, picture[None]) if picture is not None
                    else torch.zeros(1, tokens, ccfg["dim"]))
        full_ref = None
        if cfg.get("add_ref_conv", False):
            full_ref = (encode(vcfg, vp, ref[None, :, None])[:, :, 0] if ref is not None
                        else torch.zeros(1, noise.shape[0], noise.shape[2], noise.shape[3]))
        sigmas = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / steps for i in range(steps + 1))]
        x = noise[None].clone()
        empty = torch.zeros(1, 1, context.shape[1])
        for i in range(steps):
            t = torch.tensor([1000.0 * sigmas[i]])
            cond = wan.forward(cfg, p, x, t, context[None], y=y, clip_fea=clip_fea, full_ref=full_ref)
            uncond = wan.forward(cfg, p, x, t, empty, y=y, clip_fea=clip_fea, full_ref=full_ref)
            x = x + (sigmas[i + 1] - sigmas[i]) * (uncond + guidance * (cond - uncond))
    wan.write_safetensors(out_path, {"latents": x[0]})
    write_wansample_inputs(os.path.dirname(out_path), noise, context)


if __name__ == "__main__":
    main()
