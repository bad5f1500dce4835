#!/usr/bin/env python3
"""transformers' own CLIPVisionModel as the peer of wantrain's CLIP tower.

Builds the model from the CLIPVisionConfig keys of CONFIG, gives its weights
random values (seeded; the norms around 1, weights at unit gain), saves it
with save_pretrained into ROOT/image_encoder (as a diffusers image-to-video
pipeline keeps it), and runs it as WanImageToVideoPipeline does
(output_hidden_states, the hidden states before the last layer) on INPUTS
(safetensors: images [N, 3, S, S] in [-1, 1] at the config's image_size),
taken to CLIP's pixel values as Wan takes them: x * 0.5 + 0.5, then OpenAI
CLIP's mean and std per channel. Writes those features (`features`) to OUT.

Usage: clip_vision.py CONFIG ROOT INPUTS OUT
"""

import json
import math
import sys

import torch

try:
    from safetensors.torch import load_file, save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel
except ImportError as e:
    sys.exit(f"clip_vision.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")

# OpenAI CLIP's normalisation (CLIPImageProcessor's image_mean and image_std).
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


def main(config_path, root, inputs_path, out_path):
    with open(config_path) as f:
        config = CLIPVisionConfig(**json.load(f))
    torch.manual_seed(17)
    model = CLIPVisionModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1 if name.endswith("weight") else 0) + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.numel() / p.shape[0]))
    model.save_pretrained(f"{root}/image_encoder", safe_serialization=True)
    images = load_file(inputs_path)["images"]
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    pixels = (images * 0.5 + 0.5 - mean) / std
    with torch.no_grad():
        features = model(pixel_values=pixels, output_hidden_states=True).hidden_states[-2]
    save_file({"features": features.contiguous()}, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
