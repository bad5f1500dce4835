#!/usr/bin/env python3
"""A Wan2.2 A14B-shaped diffusers pipeline folder: two experts.

Builds two WanTransformer3DModel of the diffusers config CONFIG (from_config),
each with its own random weights (seeded), and saves them as a WanPipeline
saves Wan2.2 A14B: ROOT/transformer (the high-noise expert) and
ROOT/transformer_2 (the low-noise one), each by save_pretrained, and
ROOT/model_index.json with boundary_ratio BOUNDARY.

Usage: diffusers_experts.py CONFIG ROOT BOUNDARY
"""

import json
import sys

import torch

try:
    from diffusers import WanTransformer3DModel
except ImportError as e:
    sys.exit(f"diffusers_experts.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")


def main(config_path, root, boundary):
    with open(config_path) as f:
        config = json.load(f)
    for seed, folder in [(7, "transformer"), (8, "transformer_2")]:
        torch.manual_seed(seed)
        model = WanTransformer3DModel.from_config(config)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.2)
        model.save_pretrained(f"{root}/{folder}", safe_serialization=True)
    with open(f"{root}/model_index.json", "w") as f:
        json.dump({"_class_name": "WanPipeline", "_diffusers_version": "0.42.1", "boundary_ratio": float(boundary),
                   "transformer": ["diffusers", "WanTransformer3DModel"],
                   "transformer_2": ["diffusers", "WanTransformer3DModel"]}, f)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
