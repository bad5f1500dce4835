#!/usr/bin/env python3
"""A Wan2.2-Fun-A14B-Control model's guided sampling loop, independent of
wantrain, written from VideoX-Fun's
videox_fun/pipeline/pipeline_wan2_2_fun_control.py and
examples/wan2.2_fun/predict_v2v_control.py: the condition built as its
__call__ builds it from a start picture given the way the example gives it
(get_image_to_video_latent: the picture tiled over every frame, the pixel
mask 0 on frame 0 and 255 after), two experts (the high-noise one for
timesteps at or above boundary * 1000), the forward of wan_reference.py (an
i2v model of in_dim 3 out_dim + 4 without CLIP, with ref_conv),
classifier-free guidance in which only the text differs (the all-zero text
context, what wantrain's --text-drop trains), and the flow-matching Euler
step on Wan's shifted schedule.

  fun_control_a14b_sample_reference.py MODEL_CONFIG LOW_WEIGHTS HIGH_WEIGHTS VAE_CONFIG VAE_WEIGHTS INPUTS OUT

INPUTS holds control [3, F, H, W], start [3, H, W] and ref [3, H, W] in
[-1, 1] at the sample's size (each optional), noise [C, T, H/8, W/8],
context [L, text_dim], and one-element steps, cfg, shift, boundary. OUT
gets "latents" [C, T, H/8, W/8]. Beside OUT, wansample's inputs: noise.h5
(/noise) and text.h5 (/text_emb).

The condition, as the pipeline builds it:
  - control latents: the control video through the VAE (its mean), zeros
    without one;
  - with a start picture: video = the picture on every frame, mask 1 (to
    generate) on frames 1.. and 0 on frame 0; masked video = video where
    mask < 0.5, else 0, through the VAE in one pass; the mask's first frame
    repeated 4 times, folded 4 frames to a latent frame as 4 channels, and
    1 - mask resized (trilinear, align_corners false) to the latents' size,
    frame 0 on its own and the rest together (resize_mask);
  - without one (the mask all 255): mask latents and masked video latents
    zeros;
  - y = [control latents, mask latents, masked video latents];
  - full_ref: the reference picture alone through the VAE, its one latent
    frame; zeros without one;
  - guidance: y and full_ref the same in both branches.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

import wan_reference as wan
from vace_sample_reference import write_wansample_inputs
from vae_reference import check_weights, encode, load_config


def resize_mask(mask, latent_size):
    """pipeline_wan2_2_fun_control.resize_mask with process_first_frame_only."""
    first = F.interpolate(mask[:, :, 0:1], size=[1] + list(latent_size[1:]), mode="trilinear", align_corners=False)
    if latent_size[0] == 1:
        return first
    rest = F.interpolate(mask[:, :, 1:], size=[latent_size[0] - 1] + list(latent_size[1:]), mode="trilinear",
                         align_corners=False)
    return torch.cat([first, rest], dim=2)


def start_condition(encode, start, t_lat, h_lat, w_lat):
    """The pipeline's condition of a start picture [3, H, W] given as the
    example gives it: the picture on every frame, the pixel mask 1 (to make)
    on frames 1.. and 0 on frame 0; the video where mask < 0.5 through
    `encode` in one pass; the mask's first frame repeated 4 times and folded
    4 frames to a latent frame, 1 - it resized by resize_mask. Returns the
    mask latents [1, 4, T, h, w], the masked video's latents and the folded
    pixel mask [1, 4, T, H, W]."""
    frames, height, width = 4 * (t_lat - 1) + 1, start.shape[1], start.shape[2]
    video = start[None, :, None].repeat(1, 1, frames, 1, 1)
    pixel_mask = torch.ones(1, 1, frames, height, width)
    pixel_mask[:, :, 0] = 0
    masked_video = video * (pixel_mask.repeat(1, 3, 1, 1, 1) < 0.5)
    folded = torch.cat([pixel_mask[:, :, 0:1].repeat_interleave(4, dim=2), pixel_mask[:, :, 1:]], dim=2)
    folded = folded.view(1, folded.shape[2] // 4, 4, height, width).transpose(1, 2)
    return resize_mask(1 - folded, (t_lat, h_lat, w_lat)), encode(masked_video), folded


def main():
    (model_config, low_weights, high_weights, vae_config, vae_weights, inputs_path, out_path) = sys.argv[1:8]
    with open(model_config) as f:
        cfg = json.load(f)
    low, high = wan.read_safetensors(low_weights), wan.read_safetensors(high_weights)
    vcfg = load_config(vae_config)
    vp = wan.read_safetensors(vae_weights)
    check_weights(vcfg, vp)
    inputs = wan.read_safetensors(inputs_path)
    noise, context = inputs["noise"], inputs["context"]
    steps, guidance, shift, boundary = (float(inputs[k][0]) for k in ("steps", "cfg", "shift", "boundary"))
    steps = int(steps)
    control, start, ref = inputs.get("control"), inputs.get("start"), inputs.get("ref")
    with torch.no_grad():
        latents_shape = (1,) + tuple(noise.shape)
        c, t_lat, h_lat, w_lat = noise.shape
        control_latents = encode(vcfg, vp, control[None]) if control is not None else torch.zeros(latents_shape)
        if start is not None:
            mask_latents, masked_latents, _ = start_condition(lambda v: encode(vcfg, vp, v), start, t_lat, h_lat,
                                                              w_lat)
        else:
            mask_latents = torch.zeros(1, 4, t_lat, h_lat, w_lat)
            masked_latents = torch.zeros(latents_shape)
        y = torch.cat([control_latents, mask_latents, masked_latents], dim=1)
        full_ref = None
        if cfg.get("add_ref_conv", False):
            full_ref = (encode(vcfg, vp, ref[None, :, None])[:, :, 0] if ref is not None
                        else torch.zeros(1, c, h_lat, w_lat))
        sigmas = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / steps for i in range(steps + 1))]
        x = noise[None].clone()
        empty = torch.zeros(1, 1, context.shape[1])
        for i in range(steps):
            t = torch.tensor([1000.0 * sigmas[i]])
            p = high if t.item() >= boundary * 1000 else low
            cond = wan.forward(cfg, p, x, t, context[None], y=y, full_ref=full_ref)
            uncond = wan.forward(cfg, p, x, t, empty, y=y, full_ref=full_ref)
            x = x + (sigmas[i + 1] - sigmas[i]) * (uncond + guidance * (cond - uncond))
    wan.write_safetensors(out_path, {"latents": x[0]})
    write_wansample_inputs(os.path.dirname(out_path), noise, context)


if __name__ == "__main__":
    main()
