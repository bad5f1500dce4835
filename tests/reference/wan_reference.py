#!/usr/bin/env python3
"""An independent PyTorch evaluation of the official Wan2.1 WanModel forward
pass (text-to-video, image-to-video, first-last-frame-to-video), used to check
that wantrain's LibTorch port computes the same outputs from the same weights
and inputs.

It follows the structure of the official wan/modules/model.py: RoPE through
complex numbers in float64 (torch.polar, view_as_complex), the sinusoidal
embedding in float64, RMSNorm/LayerNorm in float32, unpatchify by einsum. It
reads only safetensors files and uses no wantrain code.

usage: wan_reference.py CONFIG.json WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors
  INPUTS holds x [B,C,F,H,W], t [B] (or [B,L], a timestep per token, as
  Wan2.2's model takes it), context [B,Lc,text_dim] (float32), and
  optionally y [B,Cy,F,H,W] (joined to x on the channel axis before the patch
  embedding, so in_dim = C + Cy) and clip_fea [B,N,image_dim] (CLIP features;
  N = image_tokens for i2v, 2*image_tokens for flf2v: the first image's
  tokens, then the last image's);
  For a vace model INPUTS also holds vace_context [B,vace_in_dim,F,H,W] and
  vace_scale [1] (the official vace_context_scale). For a model with
  add_ref_conv it may hold full_ref [B,out_dim,H,W] (zeros when absent).
  OUT receives "out" [B,out_dim,F,H,W] (float32).

CONFIG holds WanModel's settings (dim, ffn_dim, num_heads, num_layers,
freq_dim, text_dim, text_len, patch_size, in_dim, out_dim, eps, qk_norm,
cross_attn_norm) and optionally:
  model_type    "t2v" (default), "i2v", "flf2v"; "ti2v" runs as "t2v" (its
                first-frame condition is in the per-token t and x).
  image_dim     width of the CLIP features (1280 in the releases); 0 or
                absent: no CLIP branch.
  image_tokens  CLIP tokens per image (257 in the releases, the default);
                only sizes flf2v's img_emb.emb_pos [1, 2*image_tokens,
                image_dim].
  vace_layers, vace_in_dim  with model_type "vace" (Wan2.1-VACE, the
                official VaceWanModel of wan/modules/vace_model.py): the
                VACE blocks vace_blocks.N (a Wan block each, the first with
                before_proj, every one with after_proj) run first, over the
                patch-embedded vace_context, block 0 starting from
                before_proj(c) + x; each gives a hint after_proj(c); base
                block vace_layers[N] adds hint N times the scale to its
                output. Defaults as the official: every second block, in_dim.

  add_ref_conv  VideoX-Fun's Wan2.1-Fun-Control V1.1 (its
                videox_fun/models/wan_transformer3d.py): a Conv2d ref_conv
                (kernel and stride the patch's height and width) turns the
                reference latents full_ref into one frame of tokens put
                before the video's: the grid has a frame more (RoPE frame 0
                for the reference), a per-token t is padded at the front
                with its last value, and the reference's tokens are dropped
                after the head. (Fun-Control's y, [control latents, start
                frame latents], is any y to this model: in_dim = 3 out_dim;
                Wan2.2-Fun's, [control latents, mask, masked video latents],
                in_dim = 3 out_dim + 4.)

With image_dim > 0 and model_type i2v or flf2v (the Wan2.1 I2V/FLF2V
checkpoints), img_emb (the official MLPProj) turns clip_fea into image
context tokens placed before the text tokens, and every block's
cross-attention is the official WanI2VCrossAttention: the text attention as
for t2v plus an attention of the same queries over k_img/v_img of the image
tokens, the two summed before the output projection o. With image_dim 0 (the
Wan2.2 I2V-A14B experts) an i2v model is a t2v model fed x and y joined.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[entry["dtype"]])
        tensors[name] = t.reshape(entry["shape"]).float()
    return tensors


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def sinusoidal_embedding_1d(dim, position):
    half = dim // 2
    position = position.to(torch.float64)
    sinusoid = torch.outer(position, torch.pow(10000, -torch.arange(half, dtype=torch.float64).div(half)))
    return torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1)


def rope_params(max_len, dim, theta=10000):
    freqs = torch.outer(torch.arange(max_len, dtype=torch.float64),
                        1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=torch.float64).div(dim)))
    return torch.polar(torch.ones_like(freqs), freqs)


def rope_apply(x, grid, freqs):
    b, s, n, c = x.size(0), x.size(1), x.size(2), x.size(3) // 2
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    f, h, w = grid
    xc = torch.view_as_complex(x.to(torch.float64).reshape(b, s, n, -1, 2))
    fr = torch.cat([parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                    parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                    parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1)], dim=-1).reshape(s, 1, -1)
    return torch.view_as_real(xc * fr).flatten(3).float()


def linear(p, name, x):
    return F.linear(x, p[name + ".weight"], p[name + ".bias"])


def rms_norm(p, name, x, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * p[name + ".weight"]


def layer_norm(x, eps, p=None, name=None):
    w = p[name + ".weight"] if p is not None else None
    b = p[name + ".bias"] if p is not None else None
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps)


def attention(q, k, v):  # [B, L, n, d], [B, S, n, d]
    q, k, v = (u.transpose(1, 2) for u in (q, k, v))
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return (weights @ v).transpose(1, 2)


def image_branch(cfg):
    """Whether the model has the CLIP branch (img_emb, k_img/v_img)."""
    return cfg.get("image_dim", 0) > 0 and cfg.get("model_type", "t2v") in ("i2v", "flf2v")


def image_embedding(cfg, p, clip_fea):
    """The official MLPProj: CLIP features [B, N, image_dim] -> [B, N, dim]."""
    if cfg.get("model_type") == "flf2v":
        # The first image's tokens, then the last image's, each tagged by a
        # learnt position embedding. (The official pipeline hands the two
        # images as a batch of 2 and views it as one sequence of 2*257.)
        tokens = 2 * cfg.get("image_tokens", 257)
        clip_fea = clip_fea.reshape(-1, tokens, clip_fea.shape[-1]) + p["img_emb.emb_pos"]
    # nn.LayerNorm defaults (eps 1e-5, affine) and the exact erf GELU here,
    # unlike the rest of the model (eps from the config, tanh GELU).
    h = layer_norm(clip_fea, 1e-5, p, "img_emb.proj.0")
    h = linear(p, "img_emb.proj.3", F.gelu(linear(p, "img_emb.proj.1", h)))
    return layer_norm(h, 1e-5, p, "img_emb.proj.4")


def vace_layers(cfg):
    return cfg.get("vace_layers", list(range(0, cfg["num_layers"], 2)))


def forward(cfg, p, x, t, context, y=None, clip_fea=None, vace_context=None, vace_scale=1.0, full_ref=None):
    dim, heads, eps = cfg["dim"], cfg["num_heads"], cfg["eps"]
    d = dim // heads
    patch = cfg["patch_size"]
    freqs = torch.cat([rope_params(1024, d - 4 * (d // 6)), rope_params(1024, 2 * (d // 6)),
                       rope_params(1024, 2 * (d // 6))], dim=1)
    if y is not None:
        x = torch.cat([x, y], dim=1)
    x = F.conv3d(x, p["patch_embedding.weight"], p["patch_embedding.bias"], stride=patch)
    grid = list(x.shape[2:])
    video_grid = list(grid)
    x = x.flatten(2).transpose(1, 2)
    ref_len = 0
    if cfg.get("add_ref_conv", False):
        if full_ref is None:
            full_ref = x.new_zeros(x.shape[0], cfg["out_dim"], grid[1] * patch[1], grid[2] * patch[2])
        ref = F.conv2d(full_ref, p["ref_conv.weight"], p["ref_conv.bias"], stride=patch[1:]).flatten(2).transpose(1, 2)
        ref_len = ref.shape[1]
        x = torch.cat([ref, x], dim=1)
        grid[0] += 1
        if t.dim() == 2:
            t = torch.cat([t[:, -1:].repeat(1, ref_len), t], dim=1)
    b, s = x.shape[0], x.shape[1]

    # Wan2.2 takes t [B] or [B, L]: one timestep per token, each with its own
    # time embedding and modulation (Wan2.1 only [B]).
    per_token = t.dim() == 2
    e = sinusoidal_embedding_1d(cfg["freq_dim"], t.flatten()).float()
    e = linear(p, "time_embedding.2", F.silu(linear(p, "time_embedding.0", e)))
    e0 = linear(p, "time_projection.1", F.silu(e)).unflatten(1, (6, dim))
    if per_token:
        assert t.shape == (b, s), f"per-token t must be [B, L] = [{b}, {s}], got {list(t.shape)}"
        e, e0 = e.unflatten(0, (b, s)), e0.unflatten(0, (b, s))  # [B, L, dim], [B, L, 6, dim]

    def modulation(name, emb, parts):
        if per_token:  # [1, 1, parts, dim] + [B, L, parts, dim], split into [B, L, dim]
            return [u.squeeze(2) for u in (p[name].unsqueeze(0) + emb).chunk(parts, dim=2)]
        return (p[name] + emb).chunk(parts, dim=1)  # [1, parts, dim] + [B, parts, dim]

    ctx = torch.cat([context, context.new_zeros(b, cfg["text_len"] - context.shape[1], context.shape[2])], dim=1)
    ctx = linear(p, "text_embedding.2", F.gelu(linear(p, "text_embedding.0", ctx), approximate="tanh"))
    # The official model prepends the image tokens to the text tokens and
    # every block splits them again (the text part being the last text_len);
    # they are kept apart here.
    img = image_embedding(cfg, p, clip_fea) if image_branch(cfg) else None

    def block(pre, x):
        m = modulation(pre + "modulation", e0, 6)
        y = layer_norm(x, eps) * (1 + m[1]) + m[0]
        q, k, v = (linear(p, pre + "self_attn." + n, y) for n in "qkv")
        if cfg["qk_norm"]:
            q, k = rms_norm(p, pre + "self_attn.norm_q", q, eps), rms_norm(p, pre + "self_attn.norm_k", k, eps)
        q, k, v = (u.view(b, s, heads, d) for u in (q, k, v))
        y = attention(rope_apply(q, grid, freqs), rope_apply(k, grid, freqs), v).flatten(2)
        x = x + linear(p, pre + "self_attn.o", y) * m[2]

        y = layer_norm(x, eps, p, pre + "norm3") if cfg["cross_attn_norm"] else x
        q = linear(p, pre + "cross_attn.q", y)
        k, v = linear(p, pre + "cross_attn.k", ctx), linear(p, pre + "cross_attn.v", ctx)
        if cfg["qk_norm"]:
            q, k = rms_norm(p, pre + "cross_attn.norm_q", q, eps), rms_norm(p, pre + "cross_attn.norm_k", k, eps)
        q = q.view(b, s, heads, d)
        y = attention(q, k.view(b, -1, heads, d), v.view(b, -1, heads, d)).flatten(2)
        if img is not None:
            # Same queries over the image tokens: own k_img/v_img and its own
            # RMSNorm (norm_k_img, not norm_k); summed before o.
            k, v = linear(p, pre + "cross_attn.k_img", img), linear(p, pre + "cross_attn.v_img", img)
            if cfg["qk_norm"]:
                k = rms_norm(p, pre + "cross_attn.norm_k_img", k, eps)
            y = y + attention(q, k.view(b, -1, heads, d), v.view(b, -1, heads, d)).flatten(2)
        x = x + linear(p, pre + "cross_attn.o", y)

        y = layer_norm(x, eps) * (1 + m[4]) + m[3]
        y = linear(p, pre + "ffn.2", F.gelu(linear(p, pre + "ffn.0", y), approximate="tanh"))
        return x + y * m[5]

    hints = []
    if cfg.get("model_type") == "vace":
        # forward_vace: every VACE block first, every hint kept.
        c = F.conv3d(vace_context, p["vace_patch_embedding.weight"], p["vace_patch_embedding.bias"], stride=patch)
        c = c.flatten(2).transpose(1, 2)
        for n in range(len(vace_layers(cfg))):
            pre = f"vace_blocks.{n}."
            if n == 0:
                c = linear(p, pre + "before_proj", c) + x
            c = block(pre, c)
            hints.append(linear(p, pre + "after_proj", c))
    for i in range(cfg["num_layers"]):
        x = block(f"blocks.{i}.", x)
        if cfg.get("model_type") == "vace" and i in vace_layers(cfg):
            x = x + hints[vace_layers(cfg).index(i)] * vace_scale

    shift, scale = modulation("head.modulation", e.unsqueeze(2) if per_token else e.unsqueeze(1), 2)
    x = linear(p, "head.head", layer_norm(x, eps) * (1 + scale) + shift)
    x = x[:, ref_len:]
    grid = video_grid

    c = cfg["out_dim"]
    out = []
    for u in x:
        u = u[:math.prod(grid)].view(*grid, *patch, c)
        u = torch.einsum("fhwpqrc->cfphqwr", u)
        out.append(u.reshape(c, *[i * j for i, j in zip(grid, patch)]))
    return torch.stack(out)


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    with open(config_path) as f:
        cfg = json.load(f)
    p = read_safetensors(weights_path)
    if cfg.get("model_type", "t2v") not in ("t2v", "i2v", "flf2v", "ti2v", "vace"):
        sys.exit(f"wan_reference.py: unknown model_type {cfg['model_type']!r}")
    inputs = read_safetensors(inputs_path)
    if image_branch(cfg) and "clip_fea" not in inputs:
        sys.exit("wan_reference.py: the model has a CLIP branch (image_dim > 0) but INPUTS holds no clip_fea")
    if not image_branch(cfg) and "clip_fea" in inputs:
        sys.exit("wan_reference.py: INPUTS holds clip_fea but the model has no CLIP branch")
    with torch.no_grad():
        scale = float(inputs["vace_scale"][0]) if "vace_scale" in inputs else 1.0
        out = forward(cfg, p, inputs["x"], inputs["t"], inputs["context"], inputs.get("y"), inputs.get("clip_fea"),
                      inputs.get("vace_context"), scale, inputs.get("full_ref"))
    write_safetensors(out_path, {"out": out})


if __name__ == "__main__":
    main()
