#!/usr/bin/env python3
"""A Wan2.2-Fun-5B-Control model's guided sampling loop, independent of
wantrain, written from VideoX-Fun's
videox_fun/pipeline/pipeline_wan2_2_fun_control.py (its
`vae.spatial_compression_ratio >= 16` branches) and
examples/wan2.2_fun/predict_v2v_control_5b.py: one model on the Wan2.2 VAE
(vae22_reference.py), the condition built as __call__ builds it from a start
picture given the way the example gives it (get_image_to_video_latent: the
picture on every frame, the pixel mask 0 on frame 0 and 255 after), the
forward of wan_reference.py (an i2v model of in_dim 3 out_dim + 4 without
CLIP, with ref_conv), classifier-free guidance in which only the text
differs (the all-zero text context, what wantrain's --text-drop trains), and
the flow-matching Euler step on Wan's shifted schedule.

  fun_control_5b_sample_reference.py MODEL_CONFIG WEIGHTS VAE_CONFIG VAE_WEIGHTS INPUTS OUT

INPUTS holds control [3, F, H, W], start [3, H, W] and ref [3, H, W] in
[-1, 1] at the sample's size (each optional), noise [C, T, H/16, W/16],
context [L, text_dim], and one-element steps, cfg, shift. OUT gets
"latents" [C, T, H/16, W/16]. Beside OUT, wansample's inputs: noise.h5
(/noise) and text.h5 (/text_emb).

What the 5B adds to the A14B's loop (fun_control_a14b_sample_reference.py,
whose y this is):
  - mask: the folded pixel mask's first channel (1 where a pixel is to be
    made) resized to the latents' size (trilinear, align_corners true);
    without a start picture, ones;
  - where no pixel of latent frame 0 is to be made (a start is given): the
    mask's later frames set to 1, and the latents become
    (1 - mask) * masked video latents + mask * latents, before the loop and
    after every step;
  - the timestep per token: the mask at the token's place (every second
    latent row and column) times t, in (f, h, w) order (the sequence is
    exactly the tokens, so no padding at t).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

import vae22_reference as vae22
import wan_reference as wan
from fun_control_a14b_sample_reference import start_condition
from vace_sample_reference import write_wansample_inputs


def main():
    (model_config, weights, vae_config, vae_weights, inputs_path, out_path) = sys.argv[1:7]
    with open(model_config) as f:
        cfg = json.load(f)
    p = wan.read_safetensors(weights)
    vcfg = vae22.load_config(vae_config)
    vp = wan.read_safetensors(vae_weights)
    vae22.check_weights(vcfg, vp)
    inputs = wan.read_safetensors(inputs_path)
    noise, context = inputs["noise"], inputs["context"]
    steps, guidance, shift = (float(inputs[k][0]) for k in ("steps", "cfg", "shift"))
    steps = int(steps)
    control, start, ref = inputs.get("control"), inputs.get("start"), inputs.get("ref")
    with torch.no_grad():
        latents_shape = (1,) + tuple(noise.shape)
        c, t_lat, h_lat, w_lat = noise.shape
        encode = lambda video: vae22.encode(vcfg, vp, video)  # noqa: E731
        control_latents = encode(control[None]) if control is not None else torch.zeros(latents_shape)
        if start is not None:
            mask_latents, masked_latents, folded = start_condition(encode, start, t_lat, h_lat, w_lat)
            mask = F.interpolate(folded[:, :1], size=(t_lat, h_lat, w_lat), mode="trilinear", align_corners=True)
        else:
            mask_latents = torch.zeros(1, 4, t_lat, h_lat, w_lat)
            masked_latents = torch.zeros(latents_shape)
            mask = torch.ones(1, 1, t_lat, h_lat, w_lat)
        held = not mask[:, :, 0].any()
        if held:
            mask[:, :, 1:] = 1
        y = torch.cat([control_latents, mask_latents, masked_latents], dim=1)
        full_ref = None
        if cfg.get("add_ref_conv", False):
            full_ref = (encode(ref[None, :, None])[:, :, 0] if ref is not None
                        else torch.zeros(1, c, h_lat, w_lat))
        sigmas = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / steps for i in range(steps + 1))]
        x = noise[None].clone()
        if held:
            x = (1 - mask) * masked_latents + mask * x
        empty = torch.zeros(1, 1, context.shape[1])
        ph, pw = cfg["patch_size"][1], cfg["patch_size"][2]
        for i in range(steps):
            t = 1000.0 * sigmas[i]
            per_token = (mask[0, 0][:, ::ph, ::pw] * t).flatten()[None].float()  # [1, L]
            cond = wan.forward(cfg, p, x, per_token, context[None], y=y, full_ref=full_ref)
            uncond = wan.forward(cfg, p, x, per_token, empty, y=y, full_ref=full_ref)
            x = x + (sigmas[i + 1] - sigmas[i]) * (uncond + guidance * (cond - uncond))
            if held:
                x = (1 - mask) * masked_latents + mask * x
    wan.write_safetensors(out_path, {"latents": x[0]})
    write_wansample_inputs(os.path.dirname(out_path), noise, context)


if __name__ == "__main__":
    main()
