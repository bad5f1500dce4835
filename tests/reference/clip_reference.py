#!/usr/bin/env python3
"""An independent PyTorch evaluation of the image tower of Wan's CLIP image
encoder (the visual VisionTransformer of the official wan/modules/clip.py
clip_xlm_roberta_vit_h_14, as CLIPModel.visual runs it for the I2V and FLF2V
models), written as plain functions over a state dict in the official names,
for the C++ port's tests.

  clip_reference.py CONFIG.json WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors

CONFIG may set image_size, patch_size, dim, mlp_ratio, num_heads, num_layers
(other keys are ignored); missing ones keep the ViT-H/14 values of the released checkpoint (224, 14,
1280, 4, 16, 32).
WEIGHTS holds the official names with their "visual." prefix:
visual.patch_embedding.weight [dim, 3, p, p] (no bias), visual.cls_embedding
[1, 1, dim], visual.pos_embedding [1, 1 + (image_size/p)^2, dim],
visual.pre_norm.weight/.bias and, for every block N,
visual.transformer.N.{norm1, attn.to_qkv, attn.proj, norm2, mlp.0, mlp.2}
.weight/.bias. The last block, visual.post_norm, visual.head and anything
outside "visual." (the text tower, log_scale) may be present and are unused.
INPUTS holds "images" [N, 3, H, W] in [-1, 1], at any H, W.
OUT gets "features" [N, 1 + (image_size/p)^2, dim] (float32): the hidden
states after all blocks but the last (the official use_31_block=True: no
post_norm, no head), the class token first.

What is reproduced:
  - preprocessing as CLIPModel.visual does it: a bicubic resize of each image
    to image_size x image_size (align_corners False, no antialiasing, no
    clamping), then x * 0.5 + 0.5 to [0, 1], then the OpenAI CLIP
    normalisation (x - mean) / std per channel;
  - the ViT: a patch conv (stride = kernel = patch_size, no bias because the
    tower is pre-normed), the class token in front, the learnt position
    embedding added (no interpolation: the resize always yields
    image_size), pre_norm LayerNorm, then pre-norm residual blocks
    x + proj(attn(norm1(x))), x + mlp.2(gelu(mlp.0(norm2(x)))) with the exact
    erf GELU (activation 'gelu', not QuickGELU) and LayerNorm eps 1e-5;
  - attention: to_qkv's output channels are [q | k | v], each [heads, d];
    softmax(q k^T / sqrt(d)) v over all tokens, no mask.
The official runs under fp16 autocast on GPU; this evaluates in float32.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

from wan_reference import read_safetensors, write_safetensors

# clip_xlm_roberta_vit_h_14's image tower.
DEFAULTS = {"image_size": 224, "patch_size": 14, "dim": 1280, "mlp_ratio": 4, "num_heads": 16, "num_layers": 32}

MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]

EPS = 1e-5


def load_config(path):
    with open(path) as f:
        return {**DEFAULTS, **json.load(f)}


def parameter_shapes(cfg):
    """The visual.* names the features depend on, with their shapes."""
    dim, p = cfg["dim"], cfg["patch_size"]
    hidden = int(dim * cfg["mlp_ratio"])
    tokens = 1 + (cfg["image_size"] // p) ** 2
    shapes = {
        "visual.patch_embedding.weight": (dim, 3, p, p),
        "visual.cls_embedding": (1, 1, dim),
        "visual.pos_embedding": (1, tokens, dim),
        "visual.pre_norm.weight": (dim,),
        "visual.pre_norm.bias": (dim,),
    }
    for i in range(cfg["num_layers"] - 1):
        pre = f"visual.transformer.{i}."
        for name, out_features, in_features in (("attn.to_qkv", 3 * dim, dim), ("attn.proj", dim, dim),
                                                ("mlp.0", hidden, dim), ("mlp.2", dim, hidden)):
            shapes[pre + name + ".weight"] = (out_features, in_features)
            shapes[pre + name + ".bias"] = (out_features,)
        for name in ("norm1", "norm2"):
            shapes[pre + name + ".weight"] = (dim,)
            shapes[pre + name + ".bias"] = (dim,)
    return shapes


def check_weights(cfg, p):
    expected = parameter_shapes(cfg)
    problems = [f"missing {n} {list(s)}" for n, s in expected.items() if n not in p]
    problems += [f"{n}: shape {list(p[n].shape)}, expected {list(s)}"
                 for n, s in expected.items() if n in p and tuple(p[n].shape) != tuple(s)]
    if "visual.patch_embedding.bias" in p:
        problems.append("unexpected visual.patch_embedding.bias (the pre-normed tower has none)")
    if problems:
        sys.exit("clip_reference.py: weights differ from the official state dict:\n  " + "\n  ".join(problems))


def preprocess(cfg, images):
    """[N, 3, H, W] in [-1, 1] -> [N, 3, S, S] normalised for the ViT."""
    size = cfg["image_size"]
    x = F.interpolate(images.float(), size=(size, size), mode="bicubic", align_corners=False)
    x = x * 0.5 + 0.5
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    return (x - mean) / std


def linear(p, name, x):
    return F.linear(x, p[name + ".weight"], p[name + ".bias"])


def layer_norm(p, name, x):
    return F.layer_norm(x, (x.shape[-1],), p[name + ".weight"], p[name + ".bias"], EPS)


def self_attention(cfg, p, name, x):
    b, s, c = x.shape
    n = cfg["num_heads"]
    d = c // n
    # [B, S, 3, heads, d] -> three [B, heads, S, d]
    q, k, v = linear(p, name + ".to_qkv", x).view(b, s, 3, n, d).permute(2, 0, 3, 1, 4)
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, s, c)
    return linear(p, name + ".proj", out)


def block(cfg, p, name, x):
    x = x + self_attention(cfg, p, name + ".attn", layer_norm(p, name + ".norm1", x))
    h = F.gelu(linear(p, name + ".mlp.0", layer_norm(p, name + ".norm2", x)))
    return x + linear(p, name + ".mlp.2", h)


def features(cfg, p, images):
    x = preprocess(cfg, images)
    x = F.conv2d(x, p["visual.patch_embedding.weight"], stride=cfg["patch_size"])
    x = x.flatten(2).transpose(1, 2)  # [N, patches, dim], row-major over the patch grid
    x = torch.cat([p["visual.cls_embedding"].expand(x.shape[0], -1, -1), x], dim=1)
    x = layer_norm(p, "visual.pre_norm", x + p["visual.pos_embedding"])
    for i in range(cfg["num_layers"] - 1):
        x = block(cfg, p, f"visual.transformer.{i}", x)
    return x


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    cfg = load_config(config_path)
    p = read_safetensors(weights_path)
    check_weights(cfg, p)
    inputs = read_safetensors(inputs_path)
    with torch.no_grad():
        out = features(cfg, p, inputs["images"])
    write_safetensors(out_path, {"features": out})


if __name__ == "__main__":
    main()
