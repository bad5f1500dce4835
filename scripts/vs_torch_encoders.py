#!/usr/bin/python3
"""wantrain's Wan2.1 VAE and umT5 encoder against PyTorch, side by side.

Modes:

  vs_torch_encoders.py compare [options]
      Writes random weights and inputs once (`wanbench vae|t5 --iters 0
      --save-weights --save-inputs`: the same files for both sides), then for
      --rounds rounds runs `wanbench vae|t5` (wantrain's LibTorch ports,
      lib/wan/vae and lib/wan/encoders) and the peer below on those files,
      alternating, with the same thread count, and prints the median of the
      rounds' seconds for each side and their ratio (PyTorch / wantrain:
      above 1 means wantrain is faster), each side's peak RSS, and how far
      the two outputs differ (the same computation on both sides).

  vs_torch_encoders.py peer vae|t5 --weights FILE --inputs FILE [options]
      The PyTorch side: the independent references of the official modules
      in tests/reference (vae_reference.py: WanVAE_ with its WanVAE wrapper,
      chunk by chunk as the official encode and decode loop; t5_reference.py:
      the umT5 encoder), run by the torch wheel's PyTorch under no_grad on the
      weights and inputs wanbench wrote. Prints one JSON line.

  vs_torch_encoders.py write-t5-pth OUT.pth [--layers N] [--vocab N] [--seed N]
      A torch.save'd state dict of a umT5 encoder (default: umT5-XXL, as the
      released models_t5_umt5-xxl-enc-bf16.pth: official names, bf16, 11.4 GB)
      with random weights drawn as the official init draws them, written one
      tensor at a time: each storage is filled right before torch's own
      writer copies it into the archive and freed right after, so that the
      writer holds at most the largest tensor (the 2.1 GB embedding).
"""
import argparse
import json
import os
import pickle
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
from torch_python import ensure_torch  # noqa: E402

ensure_torch()
REFERENCE = os.path.join(os.path.dirname(HERE), "tests", "reference")

# umT5-XXL, the official T5Encoder's arguments (wan/encoders/t5_encoder.hpp's defaults).
T5_XXL = {"vocab": 256384, "dim": 4096, "dim_attn": 4096, "dim_ffn": 10240, "num_heads": 64, "num_layers": 24,
          "num_buckets": 32, "shared_pos": False}


# ---------------------------------------------------------------- files

def read_safetensors(path):
    """name -> tensor in its stored dtype, read one tensor at a time (no
    second copy of the file in memory, unlike the tests' reader)."""
    import torch
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    tensors = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            raw = bytearray(end - begin)
            f.seek(8 + n + begin)
            f.readinto(raw)
            dtype = dtypes[entry["dtype"]]
            t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
            tensors[name] = t.reshape(entry["shape"])
    return tensors


def t5_config(a):
    cfg = dict(T5_XXL)
    if getattr(a, "t5_config", ""):
        with open(a.t5_config) as f:
            cfg.update(json.load(f))
    if a.layers:
        cfg["num_layers"] = a.layers
    if a.vocab:
        cfg["vocab"] = a.vocab
    return cfg


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ---------------------------------------------------------------- the peer

def run_peer(a):
    import torch
    sys.path.insert(0, REFERENCE)
    torch.set_num_threads(a.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    p = {k: v.to(dtype) for k, v in read_safetensors(a.weights).items()}
    inputs = read_safetensors(a.inputs)
    outputs, seconds = {}, {}

    if a.model == "vae":
        import torch.nn.functional as F
        import vae_reference as vr
        cfg = vr.load_config(a.vae_config) if a.vae_config else dict(vr.DEFAULTS)
        vr.check_weights(cfg, p)
        video, latents = inputs["video"].to(dtype), inputs["latents"]

        def decode(z):
            if dtype == torch.float32:
                return vr.decode(cfg, p, z)
            # The reference decodes fp32 latents with fp32 weights; with bf16
            # weights the denormalised latents go in as bf16, as wanbench's.
            mean, std = vr.latent_stats(cfg)
            x = F.conv3d((z / (1.0 / std) + mean).to(dtype), p["conv2.weight"], p["conv2.bias"])
            cache = {}
            frames = [vr.decoder_chunk(cfg, p, x[:, :, i:i + 1], cache) for i in range(x.shape[2])]
            return torch.cat(frames, dim=2).float().clamp(-1.0, 1.0)

        passes = []
        if a.passes in ("both", "encode"):
            passes.append(("latents", lambda: vr.encode(cfg, p, video).float()))
        if a.passes in ("both", "decode"):
            passes.append(("decoded", lambda: decode(latents)))
    else:
        import t5_reference as tr
        cfg = t5_config(a)
        ids, mask = inputs["ids"].long(), inputs["mask"].long()
        passes = [("out", lambda: tr.encode(cfg, p, ids, mask))]

    with torch.no_grad():
        for i in range(a.warmup + a.iters):
            for name, run in passes:
                start = time.perf_counter()
                outputs[name] = run()
                if i >= a.warmup:
                    seconds.setdefault(name, []).append(time.perf_counter() - start)
        peak = peak_rss_mib()
        profile = ""
        if a.profile:
            with torch.autograd.profiler.profile() as prof:
                for _, run in passes:
                    run()
            profile = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.profile)
    if a.save_outputs:
        from wan_reference import write_safetensors
        write_safetensors(a.save_outputs, outputs)
    names = {"latents": "encode_s", "decoded": "decode_s", "out": "encode_s"}
    result = {names[k]: statistics.median(v) for k, v in seconds.items()}
    result.update({"peak_rss_mib": peak, "threads": torch.get_num_threads()})
    if profile:
        print(profile, file=sys.stderr)
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- write-t5-pth

def write_t5_pth(a):
    import torch
    cfg = t5_config(a)
    d, da, f, heads, buckets = cfg["dim"], cfg["dim_attn"], cfg["dim_ffn"], cfg["num_heads"], cfg["num_buckets"]
    # (name, shape, std of the official init; None: ones), in the official state dict's order.
    layout = [("token_embedding.weight", (cfg["vocab"], d), 1.0)]
    if cfg["shared_pos"]:
        layout.append(("pos_embedding.embedding.weight", (buckets, heads), (2 * buckets * heads) ** -0.5))
    for i in range(cfg["num_layers"]):
        b = f"blocks.{i}."
        layout += [(b + "norm1.weight", (d,), None), (b + "attn.q.weight", (da, d), (d * da) ** -0.5),
                   (b + "attn.k.weight", (da, d), d ** -0.5), (b + "attn.v.weight", (da, d), d ** -0.5),
                   (b + "attn.o.weight", (d, da), (heads * da) ** -0.5), (b + "norm2.weight", (d,), None),
                   (b + "ffn.gate.0.weight", (f, d), d ** -0.5), (b + "ffn.fc1.weight", (f, d), d ** -0.5),
                   (b + "ffn.fc2.weight", (d, f), f ** -0.5)]
        if not cfg["shared_pos"]:
            layout.append((b + "pos_embedding.embedding.weight", (buckets, heads), (2 * buckets * heads) ** -0.5))
    layout.append(("norm.weight", (d,), None))

    # Tensors allocated but not touched (no memory yet); torch.save's own
    # pickling names their storages, and the writer below fills each one as
    # torch hands it over, then frees it.
    state = {name: torch.empty(shape, dtype=torch.bfloat16) for name, shape, _ in layout}
    std = {state[name].data_ptr(): (state[name], s) for name, _, s in layout}
    generator = torch.Generator().manual_seed(a.seed)
    written = [0]

    class FillingWriter:
        def __init__(self, path):
            self.zip = torch._C.PyTorchFileWriter(path)

        def write_record(self, name, data, size):
            if not isinstance(data, int) or data not in std:
                return self.zip.write_record(name, data, size)
            tensor, s = std.pop(data)
            flat = tensor.view(-1)
            for start in range(0, flat.numel(), 1 << 26):
                part = flat[start:start + (1 << 26)]
                part.fill_(1.0) if s is None else part.normal_(0.0, s, generator=generator)
            self.zip.write_record(name, tensor.data_ptr(), size)
            written[0] += size
            tensor.storage().resize_(0)  # the storage's memory, given back

    start = time.perf_counter()
    writer = FillingWriter(a.out)
    torch.serialization._save(state, writer, pickle, torch.serialization.DEFAULT_PROTOCOL)
    writer.zip.write_end_of_file()
    print(json.dumps({"out": a.out, "tensors": len(layout), "bytes": written[0], "seconds": time.perf_counter() - start,
                      "peak_rss_mib": peak_rss_mib()}), flush=True)


# ---------------------------------------------------------------- compare

def run(args, json_line=True):
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"vs_torch_encoders: {' '.join(args[:3])} ... failed (status {out.returncode}):\n{out.stdout}"
                 f"{out.stderr}")
    if not json_line:
        return None
    for line in reversed(out.stdout.strip().splitlines()):
        if line.startswith("{") and line.endswith("}"):
            return json.loads(line)
    sys.exit(f"vs_torch_encoders: no JSON line from {' '.join(args[:3])} ...:\n{out.stdout}{out.stderr}")


def difference(ours_path, theirs_path):
    """name -> max |wantrain - PyTorch| / max |PyTorch| over each output."""
    ours, theirs = read_safetensors(ours_path), read_safetensors(theirs_path)
    return {name: float((ours[name] - t).abs().max() / t.abs().max().clamp_min(1e-30)) for name, t in theirs.items()}


def compare_model(a, model, dtype, work):
    weights = os.path.join(work, f"{model}-weights.safetensors")
    inputs = os.path.join(work, f"{model}-inputs.safetensors")
    if model == "vae":
        shape = ["--frames", str(a.frames), "--size", a.size, "--batch", "1"]
        ours_args = [a.wanbench, "vae", *shape] + (["--vae-config", a.vae_config] if a.vae_config else [])
        peer_args = ["--vae-config", a.vae_config] if a.vae_config else []
    else:
        shape = ["--tokens", str(a.tokens), "--prompts", str(a.prompts)]
        common = ["--layers", str(a.layers), "--vocab", str(a.vocab)] + (
            ["--t5-config", a.t5_config] if a.t5_config else [])
        ours_args = [a.wanbench, "t5", *shape, *common]
        peer_args = common
    run(ours_args + ["--dtype", dtype, "--seed", str(a.seed), "--iters", "0", "--save-weights", weights,
                     "--save-inputs", inputs], json_line=False)
    ours, theirs = [], []
    for r in range(a.rounds):  # alternating: both see the machine in the same state
        last = r == a.rounds - 1
        iters = a.t5_iters if model == "t5" else a.iters
        timing = ["--dtype", dtype, "--threads", str(a.threads), "--iters", str(iters), "--warmup", str(a.warmup)]
        ours.append(run(ours_args + timing + ["--weights", weights, "--json"] +
                        (["--save-outputs", os.path.join(work, "ours.safetensors")] if last else [])))
        theirs.append(run([sys.executable, os.path.realpath(__file__), "peer", model, "--weights", weights, "--inputs",
                           inputs, *peer_args, *timing] +
                          (["--save-outputs", os.path.join(work, "theirs.safetensors")] if last else [])))
        seconds = lambda o: " + ".join(f"{o[k]:.3f}" for k in ("encode_s", "decode_s") if o.get(k))
        print(f"# {model} {dtype} round {r + 1}/{a.rounds}: wantrain {seconds(ours[-1])} s, PyTorch "
              f"{seconds(theirs[-1])} s", file=sys.stderr, flush=True)
    diff = difference(os.path.join(work, "ours.safetensors"), os.path.join(work, "theirs.safetensors"))
    what = f"{a.frames}x{a.size}" if model == "vae" else f"{a.prompts}x{a.tokens} tokens"
    rows = []
    for key, label, output in (("encode_s", "encode", "latents" if model == "vae" else "out"),
                               ("decode_s", "decode", "decoded")):
        if output not in diff:
            continue
        w, t = statistics.median(o[key] for o in ours), statistics.median(o[key] for o in theirs)
        # The fastest round of each side as well: on a shared VM a burst of
        # the host's load slows whichever side runs through it.
        best = min(o[key] for o in theirs) / min(o[key] for o in ours)
        rows.append({"model": model, "pass": label, "dtype": dtype, "shape": what, "wantrain_s": w, "pytorch_s": t,
                     "ratio": t / w, "ratio_of_fastest": best,
                     "wantrain_peak_rss_mib": max(o["peak_rss_mib"] for o in ours),
                     "pytorch_peak_rss_mib": max(o["peak_rss_mib"] for o in theirs),
                     "max_relative_difference": diff[output]})
        print(f"{'VAE' if model == 'vae' else 'umT5'} {label:<7} {dtype:<5} {what:>18} {w:>12.3f} {t:>12.3f} "
              f"{t / w:>7.2f}x {best:>8.2f}x {rows[-1]['wantrain_peak_rss_mib']:>10.0f} "
              f"{rows[-1]['pytorch_peak_rss_mib']:>10.0f} {diff[output]:>10.1e}", flush=True)
    for path in (weights, inputs):
        os.remove(path)
    return rows


def run_compare(a):
    if not os.path.exists(a.wanbench):
        sys.exit(f"vs_torch_encoders: no wanbench at {a.wanbench} (build first, or give --wanbench)")
    work = tempfile.mkdtemp(prefix="vs-torch-encoders-", dir=a.dir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its files (finally below)
    t5_shape = f"{a.layers or 24} layers, vocab {a.vocab or T5_XXL['vocab']}"
    print(f"# wantrain (wanbench vae|t5) against PyTorch (tests/reference, the torch wheel's PyTorch), {a.threads} thread(s) "
          f"each, median of {a.rounds} alternating rounds (each side's median of {a.iters} VAE or {a.t5_iters} umT5 "
          f"passes after {a.warmup} warm-up); VAE: "
          f"{a.vae_config or 'Wan2.1'}, batch 1, frames x WxH; umT5: {a.t5_config or 'umT5-XXL'} with {t5_shape}; "
          f"ratio = PyTorch / wantrain (of the medians; fastest: of each side's fastest round); difference = "
          f"max |wantrain - PyTorch| / max |PyTorch|")
    print(f"{'model':<4} {'pass':<7} {'dtype':<5} {'shape':>18} {'wantrain s':>12} {'PyTorch s':>12} {'ratio':>8} "
          f"{'fastest':>9} {'RSS MiB w':>10} {'RSS MiB pt':>10} {'difference':>10}", flush=True)
    rows = []
    try:
        for model in a.models.split(","):
            for dtype in (a.vae_dtypes if model == "vae" else a.t5_dtypes).split(","):
                rows += compare_model(a, model, dtype, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps({"rows": rows}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    peer = sub.add_parser("peer", help="the PyTorch side on wanbench's weights and inputs")
    compare = sub.add_parser("compare", help="wanbench vae|t5 and the peer, alternated, with ratios")
    writer = sub.add_parser("write-t5-pth", help="a torch.save'd umT5 state dict with random bf16 weights")
    peer.add_argument("model", choices=["vae", "t5"])
    peer.add_argument("--weights", required=True)
    peer.add_argument("--inputs", required=True)
    peer.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    peer.add_argument("--passes", choices=["both", "encode", "decode"], default="both", help="VAE: what to run")
    peer.add_argument("--save-outputs", default="")
    peer.add_argument("--profile", type=int, default=0, help="then print the N operators with the most self time")
    for q in (peer, compare):
        q.add_argument("--threads", type=int, default=2, help="CPU threads of each side")
        q.add_argument("--iters", type=int, default=1, help="timed passes (the median is reported)")
        q.add_argument("--warmup", type=int, default=1, help="untimed passes first")
        q.add_argument("--vae-config", default="", help="VAE config JSON (empty: Wan2.1's)")
    for q in (peer, compare, writer):
        q.add_argument("--t5-config", default="", help="umT5 config JSON (empty: umT5-XXL)")
        q.add_argument("--layers", type=int, default=0, help="umT5 blocks in place of the config's (0: its own)")
        q.add_argument("--vocab", type=int, default=0, help="umT5 vocabulary in place of the config's (0: its own)")
    compare.add_argument("--models", default="vae,t5", help="vae, t5 or both")
    compare.add_argument("--frames", type=int, default=17, help="VAE: video frames, 1 + 4k")
    compare.add_argument("--size", default="128x128", help="VAE: video width x height")
    compare.add_argument("--vae-dtypes", default="fp32")
    compare.add_argument("--tokens", type=int, default=100, help="umT5: tokens per prompt")
    compare.add_argument("--prompts", type=int, default=1, help="umT5: prompts per forward")
    compare.add_argument("--t5-dtypes", default="fp32,bf16")
    compare.add_argument("--t5-iters", type=int, default=10, help="umT5: timed passes a round (a pass is short)")
    compare.add_argument("--rounds", type=int, default=3, help="alternating rounds (the median is reported)")
    compare.add_argument("--seed", type=int, default=0, help="of the random weights and inputs")
    compare.add_argument("--dir", default=None, help="where the weights and inputs go for the run (default $TMPDIR)")
    compare.add_argument("--wanbench", default="build/release/apps/wanbench/wanbench")
    compare.add_argument("--json", action="store_true", help="then the rows as one JSON line")
    compare.set_defaults(layers=4, vocab=32000)
    writer.add_argument("out")
    writer.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.mode == "peer":
        run_peer(a)
    elif a.mode == "write-t5-pth":
        write_t5_pth(a)
    else:
        run_compare(a)


if __name__ == "__main__":
    main()
