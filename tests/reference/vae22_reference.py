"""An independent PyTorch evaluation of the official Wan2.2 video VAE (the
Wan2_2_VAE wrapper around WanVAE_ of wan/modules/vae2_2.py, eval mode, the
VAE of TI2V-5B), written as plain functions over a state dict in the official
names, for the C++ port's tests.

  vae22_reference.py CONFIG.json WEIGHTS.safetensors INPUTS.safetensors OUT.safetensors

CONFIG holds WanVAE_'s constructor arguments (dim, dec_dim, z_dim, dim_mult,
num_res_blocks, temperal_downsample; missing ones keep the values the
wrapper builds the released checkpoint with) and optionally latents_mean /
latents_std ("version" is ignored). INPUTS may hold "video" [B, 3, T, H, W]
in [-1, 1] and/or "latents" [B, z_dim, t, h, w]. OUT gets "latents" (the
normalised mean of encoding "video") and/or "decoded" (the decode of
"latents", clamped to [-1, 1]).

What Wan2.2's VAE shares with Wan2.1's (causal convs and their caches, the
RMS norm, residual and attention blocks, the resamples) is taken from
vae_reference.py, which evaluates those as the official code does. What is
Wan2.2's own is written here, index by index rather than by reshapes, so that
it checks the C++ port's reshapes rather than repeating them:

  - pictures go in and out as 2x2 patches: channel 4c + 2r + q holds colour c
    at row offset q and column offset r;
  - every encoder level adds to its output the average of its input over
    blocks of ft x fs x fs positions (zero frames in front of a chunk whose
    length is no multiple of ft), the block's values numbered (channel, t, y,
    x) and averaged in consecutive groups, one group an output channel;
  - every decoder level with a resample adds its input spread over such
    blocks, output value number k of a position's block (numbered the same
    way) taken from input channel k // repeats; on the first decoded frame
    the block's first ft - 1 frames are dropped.
"""
import json
import sys

import torch
import torch.nn.functional as F

import vae_reference as v21
from wan_reference import read_safetensors, write_safetensors

# The Wan2_2_VAE wrapper's per-channel latent statistics (z_dim 48).
WAN22_MEAN = [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
              -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
              -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
              -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
              -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
              0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667]
WAN22_STD = [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
             0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
             0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
             0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
             0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
             0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744]

# What Wan2_2_VAE builds for the released checkpoint.
DEFAULTS = {"dim": 160, "dec_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
            "temperal_downsample": [False, True, True]}


# ---------------------------------------------------------------------------
# Layout.

def encoder_levels(cfg):
    """[(in, out, space, time)] of encoder.downsamples, level by level."""
    mult, n = list(cfg["dim_mult"]), len(cfg["dim_mult"])
    widths = [cfg["dim"]] + [cfg["dim"] * m for m in mult]
    return [(widths[i], widths[i + 1], i < n - 1, i < n - 1 and bool(cfg["temperal_downsample"][i]))
            for i in range(n)]


def decoder_levels(cfg):
    """[(in, out, space, time)] of decoder.upsamples; time doubled where the
    encoder halves it, read from the last level back."""
    mult, n = list(cfg["dim_mult"]), len(cfg["dim_mult"])
    widths = [cfg["dec_dim"] * m for m in [mult[-1]] + mult[::-1]]
    up_time = list(cfg["temperal_downsample"])[::-1]
    return [(widths[i], widths[i + 1], i < n - 1, i < n - 1 and bool(up_time[i])) for i in range(n)]


def parameter_shapes(cfg):
    """Every name of WanVAE_(...).state_dict() with its shape, in module order."""
    z, nrb, shapes = cfg["z_dim"], cfg["num_res_blocks"], {}
    conv = v21._conv
    conv(shapes, "encoder.conv1", cfg["dim"], 12, 3, 3, 3)
    for i, (cin, cout, space, time) in enumerate(encoder_levels(cfg)):
        name = f"encoder.downsamples.{i}.downsamples"
        for j in range(nrb):
            v21._block_shapes(shapes, f"{name}.{j}", ("res", cin if j == 0 else cout, cout))
        if space:
            conv(shapes, f"{name}.{nrb}.resample.1", cout, cout, 3, 3)
            if time:
                conv(shapes, f"{name}.{nrb}.time_conv", cout, cout, 3, 1, 1)
    top = cfg["dim"] * cfg["dim_mult"][-1]
    for i, layer in enumerate([("res", top, top), ("attn", top), ("res", top, top)]):
        v21._block_shapes(shapes, f"encoder.middle.{i}", layer)
    shapes["encoder.head.0.gamma"] = (top, 1, 1, 1)
    conv(shapes, "encoder.head.2", 2 * z, top, 3, 3, 3)
    conv(shapes, "conv1", 2 * z, 2 * z, 1, 1, 1)
    conv(shapes, "conv2", z, z, 1, 1, 1)
    bottom = cfg["dec_dim"] * cfg["dim_mult"][-1]
    conv(shapes, "decoder.conv1", bottom, z, 3, 3, 3)
    for i, layer in enumerate([("res", bottom, bottom), ("attn", bottom), ("res", bottom, bottom)]):
        v21._block_shapes(shapes, f"decoder.middle.{i}", layer)
    for i, (cin, cout, space, time) in enumerate(decoder_levels(cfg)):
        name = f"decoder.upsamples.{i}.upsamples"
        for j in range(nrb + 1):
            v21._block_shapes(shapes, f"{name}.{j}", ("res", cin if j == 0 else cout, cout))
        if space:
            # Unlike Wan2.1's, the upsampling conv keeps the channels.
            conv(shapes, f"{name}.{nrb + 1}.resample.1", cout, cout, 3, 3)
            if time:
                conv(shapes, f"{name}.{nrb + 1}.time_conv", 2 * cout, cout, 3, 1, 1)
    out = cfg["dec_dim"] * cfg["dim_mult"][0]
    shapes["decoder.head.0.gamma"] = (out, 1, 1, 1)
    conv(shapes, "decoder.head.2", 12, out, 3, 3, 3)
    return shapes


def check_weights(cfg, p):
    expected = parameter_shapes(cfg)
    problems = [f"missing {n} {list(s)}" for n, s in expected.items() if n not in p]
    problems += [f"unexpected {n} {list(t.shape)}" for n, t in p.items() if n not in expected]
    problems += [f"{n}: shape {list(p[n].shape)}, official {list(s)}"
                 for n, s in expected.items() if n in p and tuple(p[n].shape) != tuple(s)]
    if problems:
        sys.exit("vae22_reference.py: weights differ from the official state dict:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------
# Wan2.2's own pieces, index by index.

def patchify(x):
    b, c, t, h, w = x.shape
    out = x.new_empty(b, 4 * c, t, h // 2, w // 2)
    for ch in range(c):
        for r in range(2):          # column offset
            for q in range(2):      # row offset
                out[:, 4 * ch + 2 * r + q] = x[:, ch, :, q::2, r::2]
    return out


def unpatchify(x):
    b, c4, t, h, w = x.shape
    out = x.new_empty(b, c4 // 4, t, 2 * h, 2 * w)
    for ch in range(c4 // 4):
        for r in range(2):
            for q in range(2):
                out[:, ch, :, q::2, r::2] = x[:, 4 * ch + 2 * r + q]
    return out


def average_down(x, cout, ft, fs):
    """The encoder level's shortcut over one chunk (no cache)."""
    pad = (-x.shape[2]) % ft
    if pad:
        x = torch.cat([x.new_zeros(x.shape[0], x.shape[1], pad, *x.shape[3:]), x], dim=2)
    cin = x.shape[1]
    # Value k of a position's block: (channel, t, y, x) in that order.
    values = [x[:, ch, a::ft, y::fs, z::fs]
              for ch in range(cin) for a in range(ft) for y in range(fs) for z in range(fs)]
    group = len(values) // cout
    assert group * cout == len(values)
    return torch.stack([sum(values[o * group:(o + 1) * group]) / group for o in range(cout)], dim=1)


def spread_up(x, cout, ft, fs, first):
    """The decoder level's shortcut: value k of each output block is input
    channel k // repeats, k numbered (channel, t, y, x)."""
    b, cin, t, h, w = x.shape
    per_block = ft * fs * fs
    repeats = cout * per_block // cin
    assert repeats * cin == cout * per_block
    out = x.new_empty(b, cout, t * ft, h * fs, w * fs)
    for o in range(cout):
        for a in range(ft):
            for y in range(fs):
                for z in range(fs):
                    k = o * per_block + a * fs * fs + y * fs + z
                    out[:, o, a::ft, y::fs, z::fs] = x[:, k // repeats]
    return out[:, :, ft - 1:] if first else out


# ---------------------------------------------------------------------------
# Encoder / decoder over one chunk, carrying `cache` along.

def encoder_chunk(cfg, p, x, cache):
    nrb = cfg["num_res_blocks"]
    x = v21.cached_conv3x3x3(x, p, "encoder.conv1", cache)
    for i, (cin, cout, space, time) in enumerate(encoder_levels(cfg)):
        name = f"encoder.downsamples.{i}.downsamples"
        level_input = x
        for j in range(nrb):
            x = v21.residual_block(x, p, f"{name}.{j}", cache)
        if space:
            x = v21.downsample(x, p, f"{name}.{nrb}", time, cache)
        x = x + average_down(level_input, cout, 2 if time else 1, 2 if space else 1)
    x = v21.residual_block(x, p, "encoder.middle.0", cache)
    x = v21.attention_block(x, p, "encoder.middle.1")
    x = v21.residual_block(x, p, "encoder.middle.2", cache)
    x = F.silu(v21.rms_norm(x, p["encoder.head.0.gamma"]))
    return v21.cached_conv3x3x3(x, p, "encoder.head.2", cache)


def decoder_chunk(cfg, p, x, cache, first):
    nrb = cfg["num_res_blocks"]
    x = v21.cached_conv3x3x3(x, p, "decoder.conv1", cache)
    x = v21.residual_block(x, p, "decoder.middle.0", cache)
    x = v21.attention_block(x, p, "decoder.middle.1")
    x = v21.residual_block(x, p, "decoder.middle.2", cache)
    for i, (cin, cout, space, time) in enumerate(decoder_levels(cfg)):
        name = f"decoder.upsamples.{i}.upsamples"
        level_input = x
        for j in range(nrb + 1):
            x = v21.residual_block(x, p, f"{name}.{j}", cache)
        if space:
            x = v21.upsample(x, p, f"{name}.{nrb + 1}", time, cache)
            x = x + spread_up(level_input, cout, 2 if time else 1, 2, first)
    x = F.silu(v21.rms_norm(x, p["decoder.head.0.gamma"]))
    return v21.cached_conv3x3x3(x, p, "decoder.head.2", cache)


def latent_stats(cfg):
    z = cfg["z_dim"]
    mean = cfg.get("latents_mean", WAN22_MEAN if z == 48 else [0.0] * z)
    std = cfg.get("latents_std", WAN22_STD if z == 48 else [1.0] * z)
    shape = (1, z, 1, 1, 1)
    return (torch.tensor(mean, dtype=torch.float32).reshape(shape),
            torch.tensor(std, dtype=torch.float32).reshape(shape))


def encode(cfg, p, video):
    # The whole video to patches, then chunks in time: frame 0 alone, then
    # frames 1-4, 5-8, ...
    x = patchify(video)
    n = 1 + (x.shape[2] - 1) // 4
    cache = {}
    chunks = [x[:, :, :1]] + [x[:, :, 1 + 4 * (i - 1):1 + 4 * i] for i in range(1, n)]
    h = torch.cat([encoder_chunk(cfg, p, c, cache) for c in chunks], dim=2)
    mu = F.conv3d(h, p["conv1.weight"], p["conv1.bias"])[:, :cfg["z_dim"]]
    mean, std = latent_stats(cfg)
    return (mu - mean) * (1.0 / std)


def decode(cfg, p, latents):
    mean, std = latent_stats(cfg)
    z = latents / (1.0 / std) + mean
    x = F.conv3d(z, p["conv2.weight"], p["conv2.bias"])
    cache = {}
    frames = [decoder_chunk(cfg, p, x[:, :, i:i + 1], cache, i == 0) for i in range(x.shape[2])]
    return unpatchify(torch.cat(frames, dim=2)).clamp(-1.0, 1.0)


def load_config(path):
    with open(path) as f:
        cfg = {**DEFAULTS, **json.load(f)}
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
