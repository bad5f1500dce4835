"""An independent PyTorch evaluation of Wan's umT5 text encoder (the official
wan/modules/t5.py T5Encoder, eval mode), written as plain functions over a
state dict in the official names, for tests/e2e/t5_reference_test.cpp.

  t5_reference.py CONFIG.json WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors

INPUTS holds "ids" and "mask" [B, L] (as float32); OUT gets "out" [B, L, dim].
"""
import json
import math
import sys

import torch

from wan_reference import read_safetensors, write_safetensors


def rms_norm(x, weight):
    # T5: scale by the root mean square (fp32 statistics), no mean, no bias.
    y = x * torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    if weight.dtype in (torch.float16, torch.bfloat16):
        y = y.to(weight.dtype)
    return weight * y


def position_buckets(length, num_buckets, max_distance=128):
    # Bidirectional: half the buckets for keys after the query, half before;
    # within each half, exact distances up to a quarter, then logarithmic.
    distance = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    half = num_buckets // 2
    bucket = (distance > 0).long() * half
    distance = distance.abs()
    exact = half // 2
    far = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    far = torch.clamp(far, max=half - 1)
    return bucket + torch.where(distance < exact, distance, far)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def relative_bias(p, name, length, num_buckets):
    table = p[name]  # [buckets, heads]
    return table[position_buckets(length, num_buckets)].permute(2, 0, 1)[None]  # [1, heads, L, L]


def encode(cfg, p, ids, mask):
    heads, buckets = cfg["num_heads"], cfg["num_buckets"]
    x = p["token_embedding.weight"][ids]
    b, length, _ = x.shape
    shared = relative_bias(p, "pos_embedding.embedding.weight", length, buckets) if cfg["shared_pos"] else None
    for i in range(cfg["num_layers"]):
        pre = f"blocks.{i}."
        bias = shared if cfg["shared_pos"] else relative_bias(p, pre + "pos_embedding.embedding.weight", length, buckets)
        y = rms_norm(x, p[pre + "norm1.weight"])
        q, k, v = (torch.matmul(y, p[pre + f"attn.{n}.weight"].t()).view(b, length, heads, -1) for n in "qkv")
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) + bias  # no 1/sqrt(d) in T5
        scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(x.dtype).min)
        weights = torch.softmax(scores.float(), dim=-1).to(scores.dtype)
        attended = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, length, -1)
        x = x + torch.matmul(attended, p[pre + "attn.o.weight"].t())
        y = rms_norm(x, p[pre + "norm2.weight"])
        hidden = torch.matmul(y, p[pre + "ffn.fc1.weight"].t()) * gelu_tanh(torch.matmul(y, p[pre + "ffn.gate.0.weight"].t()))
        x = x + torch.matmul(hidden, p[pre + "ffn.fc2.weight"].t())
    return rms_norm(x, p["norm.weight"])


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    with open(config_path) as f:
        cfg = {"shared_pos": False, **json.load(f)}
    p = read_safetensors(weights_path)
    inputs = read_safetensors(inputs_path)
    with torch.no_grad():
        out = encode(cfg, p, inputs["ids"].long(), inputs["mask"].long())
    write_safetensors(out_path, {"out": out})


if __name__ == "__main__":
    main()
