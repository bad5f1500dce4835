#!/usr/bin/env python3
"""diffusers' WanPipeline as the peer of wansample: its whole sampling loop.

Loads the transformer of the diffusers folder ROOT (from_pretrained, as a
pipeline does) into a WanPipeline with diffusers' flow UniPC scheduler
(UniPCMultistepScheduler with prediction_type "flow_prediction",
use_flow_sigmas and flow_shift SHIFT, as the Wan-AI *-Diffusers
repositories configure it; with ROOT/transformer_2, the low-noise expert, and
model_index.json's boundary_ratio, as Wan2.2 A14B's), and samples from the noise of NOISE (h5 /noise
[C, F, H, W], through `latents=`) with the text embedding of TEXT (h5
/text_emb [L, D], padded with zeros to 512 tokens, through
`prompt_embeds=`) and the all-zero context as the unconditional branch
(`negative_prompt_embeds=`), for STEPS steps at guidance CFG. No text
encoder and no VAE: output_type "latent". Writes the latents to OUT
(safetensors: latents [C, F, H, W]).

Usage: diffusers_pipeline.py ROOT NOISE TEXT STEPS CFG SHIFT OUT
"""

import json
import os
import sys

import h5py
import torch

try:
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from safetensors.torch import save_file
except ImportError as e:
    sys.exit(f"diffusers_pipeline.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")


def main(root, noise_path, text_path, steps, cfg, shift, out_path):
    transformer = WanTransformer3DModel.from_pretrained(root, subfolder="transformer").eval()
    # Wan2.2 A14B: transformer_2 (the low-noise expert) and model_index.json's boundary_ratio.
    transformer_2, boundary_ratio = None, None
    if os.path.isdir(f"{root}/transformer_2"):
        transformer_2 = WanTransformer3DModel.from_pretrained(root, subfolder="transformer_2").eval()
        with open(f"{root}/model_index.json") as f:
            boundary_ratio = json.load(f)["boundary_ratio"]
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=float(shift))
    pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=transformer, vae=None, scheduler=scheduler,
                       transformer_2=transformer_2, boundary_ratio=boundary_ratio)
    with h5py.File(noise_path) as f:
        noise = torch.from_numpy(f["noise"][...]).float().unsqueeze(0)  # [1, C, F, H, W]
    with h5py.File(text_path) as f:
        text = torch.from_numpy(f["text_emb"][...]).float()
    prompt = torch.zeros(1, 512, text.shape[-1])
    prompt[0, : text.shape[0]] = text
    _, _, frames, height, width = noise.shape
    spatial, temporal = pipe.vae_scale_factor_spatial, pipe.vae_scale_factor_temporal
    with torch.no_grad():
        latents = pipe(prompt_embeds=prompt, negative_prompt_embeds=torch.zeros_like(prompt),
                       height=height * spatial, width=width * spatial, num_frames=(frames - 1) * temporal + 1,
                       num_inference_steps=int(steps), guidance_scale=float(cfg), latents=noise,
                       output_type="latent", return_dict=False)[0]
    save_file({"latents": latents[0].float().contiguous()}, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 8:
        sys.exit(__doc__)
    main(*sys.argv[1:])
