#!/usr/bin/env python3
"""Writes a Wan model's weights file as a safetensors header over a hole.

The file has every official tensor name and shape of a model config (T2V
models: data/configs/*.json of model_type t2v or ti2v) and reads back as
zeros, without taking disk space: what a memory measurement of loading and
sampling a model needs, where no released weights can be downloaded
(docs/performance.md, "Sampling on several ranks").

Usage: sparse_wan_weights.py CONFIG.json OUT.safetensors [--dtype BF16|F32]
"""
import argparse
import json
import struct


def shapes(c):
    d = c["dim"]
    out = []

    def linear(name, i, o):
        out.append((name + ".weight", [o, i]))
        out.append((name + ".bias", [o]))

    def attention(prefix):
        for p in "qkvo":
            linear(prefix + p, d, d)
        if c.get("qk_norm", True):
            out.append((prefix + "norm_q.weight", [d]))
            out.append((prefix + "norm_k.weight", [d]))

    patch = c.get("patch_size", [1, 2, 2])
    out.append(("patch_embedding.weight", [d, c["in_dim"]] + patch))
    out.append(("patch_embedding.bias", [d]))
    linear("text_embedding.0", c["text_dim"], d)
    linear("text_embedding.2", d, d)
    linear("time_embedding.0", c["freq_dim"], d)
    linear("time_embedding.2", d, d)
    linear("time_projection.1", d, 6 * d)
    for i in range(c["num_layers"]):
        b = f"blocks.{i}."
        out.append((b + "modulation", [1, 6, d]))
        attention(b + "self_attn.")
        if c.get("cross_attn_norm", True):
            out.append((b + "norm3.weight", [d]))
            out.append((b + "norm3.bias", [d]))
        attention(b + "cross_attn.")
        linear(b + "ffn.0", d, c["ffn_dim"])
        linear(b + "ffn.2", c["ffn_dim"], d)
    out.append(("head.modulation", [1, 2, d]))
    linear("head.head", d, c["out_dim"] * patch[0] * patch[1] * patch[2])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--dtype", default="BF16", choices=["BF16", "F32"])
    args = parser.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    if config.get("model_type", "t2v") not in ("t2v", "ti2v"):
        raise SystemExit(f"{args.config}: only t2v and ti2v configs (no image branch)")
    size = 2 if args.dtype == "BF16" else 4
    header, offset = {}, 0
    for name, shape in shapes(config):
        n = size
        for s in shape:
            n *= s
        header[name] = {"dtype": args.dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(args.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)  # the tensors: a hole that reads as zeros


if __name__ == "__main__":
    main()
