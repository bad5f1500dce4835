"""An independent PyTorch evaluation of the official Wan2.1 video VAE (the
WanVAE wrapper around WanVAE_ of wan/modules/vae.py, eval mode), written as
plain functions over a state dict in the official names, for the C++ port's
tests.

  vae_reference.py CONFIG.json WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors

CONFIG holds WanVAE_'s constructor arguments (dim, z_dim, dim_mult,
num_res_blocks, attn_scales, temperal_downsample; missing ones keep the
defaults of the Wan2.1 checkpoint) and optionally latents_mean / latents_std.
INPUTS may hold "video" [B, 3, T, H, W] in [-1, 1] and/or "latents"
[B, z_dim, t, h, w]. OUT gets "latents" (the normalised mean of encoding
"video") and/or "decoded" (the decode of "latents", clamped to [-1, 1]).

The official code runs the network chunk by chunk in time (encode: the first
frame alone, then 4 frames at a time; decode: one latent frame at a time),
every causal convolution keeping the last frames of its input between chunks.
This file follows that scheme step by step rather than a whole-sequence
shortcut, so that the quirks of the temporal resampling (which only make sense
in the chunked form) are reproduced as they are.
"""
import json
import sys

import torch
import torch.nn.functional as F

from wan_reference import read_safetensors, write_safetensors

# Frames of its input each causal conv keeps for the next chunk.
CACHE_T = 2

# The WanVAE wrapper's per-channel latent statistics (Wan2.1, z_dim 16).
WAN21_MEAN = [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
              0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921]
WAN21_STD = [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
             3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160]

# _video_vae's settings for the released checkpoint.
DEFAULTS = {"dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
            "attn_scales": [], "temperal_downsample": [False, True, True]}

# Marker an upsample3d slot holds after the first decoded frame: that frame
# went through without the time conv, and its features must not be reused.
FIRST = "first-frame"


# ---------------------------------------------------------------------------
# Layout: which blocks sit at which index of the nn.Sequential containers.

def encoder_layout(cfg):
    """[(kind, args)] in the order of encoder.downsamples."""
    dims = [cfg["dim"] * m for m in [1] + list(cfg["dim_mult"])]
    scale, layers = 1.0, []
    for i in range(len(cfg["dim_mult"])):
        cin, cout = dims[i], dims[i + 1]
        for _ in range(cfg["num_res_blocks"]):
            layers.append(("res", cin, cout))
            if scale in cfg["attn_scales"]:
                layers.append(("attn", cout))
            cin = cout
        if i != len(cfg["dim_mult"]) - 1:
            layers.append(("down3d" if cfg["temperal_downsample"][i] else "down2d", cout))
            scale /= 2.0
    return layers, dims[-1]


def decoder_layout(cfg):
    """[(kind, args)] in the order of decoder.upsamples."""
    mult = list(cfg["dim_mult"])
    dims = [cfg["dim"] * m for m in [mult[-1]] + mult[::-1]]
    temporal_up = list(cfg["temperal_downsample"])[::-1]
    scale, layers = 1.0 / 2 ** (len(mult) - 2), []
    for i in range(len(mult)):
        cin, cout = dims[i], dims[i + 1]
        # An upsample block halves the channels, so the stages after one
        # start from half their predecessor's width (the official code spells
        # this out for stages 1 to 3 only).
        if i in (1, 2, 3):
            cin //= 2
        for _ in range(cfg["num_res_blocks"] + 1):
            layers.append(("res", cin, cout))
            if scale in cfg["attn_scales"]:
                layers.append(("attn", cout))
            cin = cout
        if i != len(mult) - 1:
            layers.append(("up3d" if temporal_up[i] else "up2d", cout))
            scale *= 2.0
    return layers, dims[0], dims[-1]


def _conv(shapes, name, cout, cin, *kernel):
    shapes[name + ".weight"] = (cout, cin, *kernel)
    shapes[name + ".bias"] = (cout,)


def _block_shapes(shapes, name, layer):
    kind = layer[0]
    if kind == "res":
        _, cin, cout = layer
        shapes[name + ".residual.0.gamma"] = (cin, 1, 1, 1)
        _conv(shapes, name + ".residual.2", cout, cin, 3, 3, 3)
        shapes[name + ".residual.3.gamma"] = (cout, 1, 1, 1)
        _conv(shapes, name + ".residual.6", cout, cout, 3, 3, 3)
        if cin != cout:
            _conv(shapes, name + ".shortcut", cout, cin, 1, 1, 1)
    elif kind == "attn":
        c = layer[1]
        shapes[name + ".norm.gamma"] = (c, 1, 1)
        _conv(shapes, name + ".to_qkv", 3 * c, c, 1, 1)
        _conv(shapes, name + ".proj", c, c, 1, 1)
    else:
        c = layer[1]
        if kind.startswith("down"):
            _conv(shapes, name + ".resample.1", c, c, 3, 3)
            if kind == "down3d":
                _conv(shapes, name + ".time_conv", c, c, 3, 1, 1)
        else:
            _conv(shapes, name + ".resample.1", c // 2, c, 3, 3)
            if kind == "up3d":
                _conv(shapes, name + ".time_conv", 2 * c, c, 3, 1, 1)


def parameter_shapes(cfg):
    """Every name of WanVAE_(...).state_dict() with its shape, in module order."""
    z, shapes = cfg["z_dim"], {}
    layers, top = encoder_layout(cfg)
    _conv(shapes, "encoder.conv1", cfg["dim"], 3, 3, 3, 3)
    for i, layer in enumerate(layers):
        _block_shapes(shapes, f"encoder.downsamples.{i}", layer)
    for i, layer in enumerate([("res", top, top), ("attn", top), ("res", top, top)]):
        _block_shapes(shapes, f"encoder.middle.{i}", layer)
    shapes["encoder.head.0.gamma"] = (top, 1, 1, 1)
    _conv(shapes, "encoder.head.2", 2 * z, top, 3, 3, 3)
    _conv(shapes, "conv1", 2 * z, 2 * z, 1, 1, 1)
    _conv(shapes, "conv2", z, z, 1, 1, 1)
    layers, bottom, out = decoder_layout(cfg)
    _conv(shapes, "decoder.conv1", bottom, z, 3, 3, 3)
    for i, layer in enumerate([("res", bottom, bottom), ("attn", bottom), ("res", bottom, bottom)]):
        _block_shapes(shapes, f"decoder.middle.{i}", layer)
    for i, layer in enumerate(layers):
        _block_shapes(shapes, f"decoder.upsamples.{i}", layer)
    shapes["decoder.head.0.gamma"] = (out, 1, 1, 1)
    _conv(shapes, "decoder.head.2", 3, out, 3, 3, 3)
    return shapes


def check_weights(cfg, p):
    expected = parameter_shapes(cfg)
    problems = [f"missing {n} {list(s)}" for n, s in expected.items() if n not in p]
    problems += [f"unexpected {n} {list(t.shape)}" for n, t in p.items() if n not in expected]
    problems += [f"{n}: shape {list(p[n].shape)}, official {list(s)}"
                 for n, s in expected.items() if n in p and tuple(p[n].shape) != tuple(s)]
    if problems:
        sys.exit("vae_reference.py: weights differ from the official state dict:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------
# Building blocks. Video tensors are [B, C, T, H, W].

def rms_norm(x, gamma):
    # L2-normalise each position's channel vector (eps 1e-12 on the norm, as
    # F.normalize does), then rescale by sqrt(C) so it has unit RMS; no bias.
    c = x.shape[1]
    y = x / x.norm(p=2, dim=1, keepdim=True).clamp_min(1e-12)
    return y * (c ** 0.5) * gamma.reshape(1, c, *([1] * (x.dim() - 2)))


def causal_conv3d(x, p, name, front, side, past=None, stride=1):
    # The official causal conv pads time with `front` zero frames before the
    # first frame and none after; cached frames of the previous chunk, when
    # given, take the place of as many of those zeros. Space is padded with
    # `side` zeros on each edge.
    if past is not None and front > 0:
        x = torch.cat([past, x], dim=2)
        front -= past.shape[2]
    x = F.pad(x, (side, side, side, side, front, 0))
    return F.conv3d(x, p[name + ".weight"], p[name + ".bias"], stride=stride)


def cached_conv3x3x3(x, p, name, cache):
    """A 3x3x3 causal conv inside the chunk loop: it sees its own last input
    frames from the previous chunk, and keeps the last CACHE_T of this one."""
    past = cache.get(name)
    keep = x[:, :, -CACHE_T:]
    if keep.shape[2] < CACHE_T and past is not None:
        # A one-frame chunk: keep the previous chunk's last frame in front so
        # the next chunk still sees two frames of history.
        keep = torch.cat([past[:, :, -1:], keep], dim=2)
    out = causal_conv3d(x, p, name, front=2, side=1, past=past)
    cache[name] = keep
    return out


def per_frame(x, fn):
    # Apply a 2-D op to every frame: fold time into the batch and back.
    b, _, t = x.shape[:3]
    y = fn(x.transpose(1, 2).reshape(b * t, x.shape[1], *x.shape[3:]))
    return y.reshape(b, t, *y.shape[1:]).transpose(1, 2)


def residual_block(x, p, name, cache):
    # Shortcut: a 1x1x1 conv (no time context, so no cache) when the width
    # changes, else identity. Dropout is 0 in eval.
    if name + ".shortcut.weight" in p:
        skip = F.conv3d(x, p[name + ".shortcut.weight"], p[name + ".shortcut.bias"])
    else:
        skip = x
    h = F.silu(rms_norm(x, p[name + ".residual.0.gamma"]))
    h = cached_conv3x3x3(h, p, name + ".residual.2", cache)
    h = F.silu(rms_norm(h, p[name + ".residual.3.gamma"]))
    h = cached_conv3x3x3(h, p, name + ".residual.6", cache)
    return h + skip


def attention_block(x, p, name):
    # Single-head self-attention among the H*W positions of each frame
    # separately (no attention across time), pre-normed, residual.
    b, c, t, hgt, wid = x.shape
    y = rms_norm(x, p[name + ".norm.gamma"])
    qkv = torch.einsum("oc,bcthw->btohw", p[name + ".to_qkv.weight"].reshape(3 * c, c), y)
    qkv = qkv + p[name + ".to_qkv.bias"].reshape(1, 1, 3 * c, 1, 1)
    qkv = qkv.reshape(b, t, 3 * c, hgt * wid)
    # Output channels of to_qkv are ordered q | k | v, c each.
    q, k, v = qkv[:, :, :c], qkv[:, :, c:2 * c], qkv[:, :, 2 * c:]
    weights = torch.softmax(torch.einsum("btcq,btck->btqk", q, k) / (c ** 0.5), dim=-1)
    attended = torch.einsum("btqk,btck->btcq", weights, v).reshape(b, t, c, hgt, wid)
    out = torch.einsum("oc,btchw->bothw", p[name + ".proj.weight"].reshape(c, c), attended)
    out = out + p[name + ".proj.bias"].reshape(1, c, 1, 1, 1)
    return out + x


def downsample(x, p, name, temporal, cache):
    # Halve H and W: pad one zero row/column at the bottom/right only, then a
    # stride-2 3x3 conv, frame by frame.
    x = per_frame(x, lambda f: F.conv2d(F.pad(f, (0, 1, 0, 1)), p[name + ".resample.1.weight"],
                                        p[name + ".resample.1.bias"], stride=2))
    if not temporal:
        return x
    past = cache.get(name)
    if past is None:
        # First chunk (the lone first frame): passes through untouched in time.
        cache[name] = x
        return x
    # Later chunks: the previous chunk's last frame, then this chunk, through
    # a kernel-3 stride-2 time conv with no padding; an even chunk of n frames
    # becomes n/2 frames.
    cache[name] = x[:, :, -1:]
    return causal_conv3d(torch.cat([past[:, :, -1:], x], dim=2), p, name + ".time_conv",
                         front=0, side=0, stride=(2, 1, 1))


def upsample(x, p, name, temporal, cache):
    if temporal:
        state = cache.get(name)
        if state is None:
            # First decoded chunk: no time conv, the frame count stays.
            cache[name] = FIRST
        else:
            keep = x[:, :, -CACHE_T:]
            if keep.shape[2] < CACHE_T:
                # The history in front of a one-frame chunk: the previous
                # chunk's last frame, or zeros right after the first chunk
                # (whose features are never used as history).
                before = torch.zeros_like(keep) if state is FIRST else state[:, :, -1:]
                keep = torch.cat([before, keep], dim=2)
            # Causal kernel-3 time conv to twice the channels (zero history
            # after the first chunk, else the cached frames)...
            y = causal_conv3d(x, p, name + ".time_conv", front=2, side=0,
                              past=None if state is FIRST else state)
            cache[name] = keep
            # ...whose two channel halves become two consecutive frames:
            # output frame 2i is half 0 at time i, frame 2i+1 is half 1.
            b, c2, t, hgt, wid = y.shape
            x = y.reshape(b, 2, c2 // 2, t, hgt, wid).permute(0, 2, 3, 1, 4, 5)
            x = x.reshape(b, c2 // 2, 2 * t, hgt, wid)
    # Double H and W by nearest neighbour ('nearest-exact' at an integer factor
    # 2 repeats each pixel twice), then a 3x3 conv to half the channels.
    return per_frame(x, lambda f: F.conv2d(f.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3),
                                           p[name + ".resample.1.weight"],
                                           p[name + ".resample.1.bias"], padding=1))


def run_block(x, p, name, layer, cache):
    kind = layer[0]
    if kind == "res":
        return residual_block(x, p, name, cache)
    if kind == "attn":
        return attention_block(x, p, name)
    if kind.startswith("down"):
        return downsample(x, p, name, kind == "down3d", cache)
    return upsample(x, p, name, kind == "up3d", cache)


# ---------------------------------------------------------------------------
# Encoder / decoder over one chunk, carrying `cache` (name -> frames) along.

def encoder_chunk(cfg, p, x, cache):
    layers, _ = encoder_layout(cfg)
    x = cached_conv3x3x3(x, p, "encoder.conv1", cache)
    for i, layer in enumerate(layers):
        x = run_block(x, p, f"encoder.downsamples.{i}", layer, cache)
    x = residual_block(x, p, "encoder.middle.0", cache)
    x = attention_block(x, p, "encoder.middle.1")
    x = residual_block(x, p, "encoder.middle.2", cache)
    x = F.silu(rms_norm(x, p["encoder.head.0.gamma"]))
    return cached_conv3x3x3(x, p, "encoder.head.2", cache)


def decoder_chunk(cfg, p, x, cache):
    layers, _, _ = decoder_layout(cfg)
    x = cached_conv3x3x3(x, p, "decoder.conv1", cache)
    x = residual_block(x, p, "decoder.middle.0", cache)
    x = attention_block(x, p, "decoder.middle.1")
    x = residual_block(x, p, "decoder.middle.2", cache)
    for i, layer in enumerate(layers):
        x = run_block(x, p, f"decoder.upsamples.{i}", layer, cache)
    x = F.silu(rms_norm(x, p["decoder.head.0.gamma"]))
    return cached_conv3x3x3(x, p, "decoder.head.2", cache)


def latent_stats(cfg):
    z = cfg["z_dim"]
    mean = cfg.get("latents_mean", WAN21_MEAN if z == 16 else [0.0] * z)
    std = cfg.get("latents_std", WAN21_STD if z == 16 else [1.0] * z)
    shape = (1, z, 1, 1, 1)
    return (torch.tensor(mean, dtype=torch.float32).reshape(shape),
            torch.tensor(std, dtype=torch.float32).reshape(shape))


def encode(cfg, p, video):
    # Chunks in time: frame 0 alone, then frames 1-4, 5-8, ... (a tail of
    # fewer than 4 frames is dropped, as the official loop does).
    n = 1 + (video.shape[2] - 1) // 4
    cache = {}
    chunks = [video[:, :, :1]] + [video[:, :, 1 + 4 * (i - 1):1 + 4 * i] for i in range(1, n)]
    h = torch.cat([encoder_chunk(cfg, p, c, cache) for c in chunks], dim=2)
    h = F.conv3d(h, p["conv1.weight"], p["conv1.bias"])
    mu = h[:, :cfg["z_dim"]]  # the second half is log_var, unused here
    mean, std = latent_stats(cfg)
    # The wrapper hands the model (mean, 1/std) and it multiplies by 1/std.
    return (mu - mean) * (1.0 / std)


def decode(cfg, p, latents):
    mean, std = latent_stats(cfg)
    z = latents / (1.0 / std) + mean  # the inverse, as the model spells it
    x = F.conv3d(z, p["conv2.weight"], p["conv2.bias"])
    cache = {}
    frames = [decoder_chunk(cfg, p, x[:, :, i:i + 1], cache) for i in range(x.shape[2])]
    return torch.cat(frames, dim=2).clamp(-1.0, 1.0)


def load_config(path):
    with open(path) as f:
        cfg = {**DEFAULTS, **json.load(f)}
    cfg["attn_scales"] = [float(s) for s in cfg["attn_scales"]]
    cfg["temperal_downsample"] = [bool(v) for v in cfg["temperal_downsample"]]
    return cfg


def main():
    config_path, weights_path, inputs_path, out_path = sys.argv[1:5]
    cfg = load_config(config_path)
    p = read_safetensors(weights_path)
    check_weights(cfg, p)
    inputs = read_safetensors(inputs_path)
    out = {}
    with torch.no_grad():
        if "video" in inputs:
            out["latents"] = encode(cfg, p, inputs["video"].float())
        if "latents" in inputs:
            out["decoded"] = decode(cfg, p, inputs["latents"].float())
    write_safetensors(out_path, out)


if __name__ == "__main__":
    main()
