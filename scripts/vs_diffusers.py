#!/usr/bin/python3
"""wansample against diffusers' WanPipeline, side by side: a sampling step.

  vs_diffusers.py compare-sample [options]
      For each model config (data/configs/*.json), diffusers builds the same
      WanTransformer3DModel with random weights and saves it as a pipeline
      folder (save_pretrained). Then, alternated for --rounds rounds, each
      side samples from the same noise and text embedding at --steps N and
      2N (UniPC at guidance 5, both branches every step; wansample with
      --schedule diffusers, WanPipeline's own scheduler), and a step is the
      difference over N (start-up and loading cancel). WanPipeline runs in
      this process with torch's --threads; wansample with its --threads.
      Prints the median seconds per step of each and the ratio (diffusers /
      wansample: above 1 means wansample is faster).

The peers are the test dependencies of scripts/install-peers.sh (diffusers
as scripts/peer-versions pins it), in the torch wheel's venv.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_python import ensure_torch  # noqa: E402

ensure_torch()

import h5py  # noqa: E402
import numpy  # noqa: E402
import torch  # noqa: E402

try:
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel  # noqa: E402
except ImportError as e:
    sys.exit(f"vs_diffusers: {e}: install the peers with scripts/install-peers.sh")


def diffusers_config(ours):
    """A data/configs JSON as WanTransformer3DModel's config (t2v models)."""
    return {"patch_size": ours["patch_size"], "num_attention_heads": ours["num_heads"],
            "attention_head_dim": ours["dim"] // ours["num_heads"], "in_channels": ours["in_dim"],
            "out_channels": ours["out_dim"], "text_dim": ours["text_dim"], "freq_dim": ours["freq_dim"],
            "ffn_dim": ours["ffn_dim"], "num_layers": ours["num_layers"], "cross_attn_norm": ours["cross_attn_norm"],
            "qk_norm": "rms_norm_across_heads" if ours["qk_norm"] else None, "eps": ours["eps"]}


def run_compare_sample(a):
    if not os.path.exists(a.wansample):
        sys.exit(f"vs_diffusers: no wansample at {a.wansample} (build first, or give --wansample)")
    torch.set_num_threads(a.threads)
    frames = a.frames
    height, width = (int(v) for v in a.size.split("x"))
    print(f"# wansample (--schedule diffusers) against diffusers' WanPipeline: UniPC, guidance 5, latents "
          f"[16, {frames}, {height}, {width}], {a.threads} threads each, fp32, median of {a.rounds} rounds of "
          f"{a.iters} and {2 * a.iters} steps")
    print(f"{'model config':<22} {'wansample s/step':>16} {'diffusers s/step':>16} {'ratio':>8}")
    for config_path in a.model_configs.split(","):
        name = os.path.basename(config_path).removesuffix(".json")
        with open(config_path) as f:
            ours = json.load(f)
        root = os.path.join(a.scratch, name)
        torch.manual_seed(0)
        model = WanTransformer3DModel(**diffusers_config(ours)).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.02)
        model.save_pretrained(os.path.join(root, "transformer"), safe_serialization=True)
        rng = numpy.random.default_rng(0)
        noise = rng.standard_normal((ours["out_dim"], frames, height, width), dtype=numpy.float32)
        text = rng.standard_normal((16, ours["text_dim"]), dtype=numpy.float32)
        with h5py.File(os.path.join(root, "noise.h5"), "w") as f:
            f["noise"] = noise
        with h5py.File(os.path.join(root, "text.h5"), "w") as f:
            f["text_emb"] = text
        prompt = torch.zeros(1, 512, ours["text_dim"])
        prompt[0, :16] = torch.from_numpy(text)
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                            num_train_timesteps=1000, flow_shift=5.0)
        pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=model, vae=None, scheduler=scheduler)
        pipe.set_progress_bar_config(disable=True)

        def diffusers_seconds(steps):
            start = time.perf_counter()
            with torch.no_grad():
                pipe(prompt_embeds=prompt, negative_prompt_embeds=torch.zeros_like(prompt), height=height * 8,
                     width=width * 8, num_frames=(frames - 1) * 4 + 1, num_inference_steps=steps, guidance_scale=5.0,
                     latents=torch.from_numpy(noise).unsqueeze(0), output_type="latent")
            return time.perf_counter() - start

        def wansample_seconds(steps):
            start = time.perf_counter()
            out = subprocess.run([a.wansample, "--weights", root, "--text", os.path.join(root, "text.h5"),
                                  "--noise", os.path.join(root, "noise.h5"), "--frames", str(frames), "--size",
                                  a.size, "--steps", str(steps), "--cfg", "5", "--shift", "5", "--schedule",
                                  "diffusers", "--weights-dtype", "fp32", "--threads", str(a.threads), "--out",
                                  os.path.join(root, "out.h5")], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"vs_diffusers: wansample failed:\n{out.stdout}{out.stderr}")
            return time.perf_counter() - start

        diffusers_seconds(1)  # warm: the allocator, the kernels
        mine, theirs = [], []
        for _ in range(a.rounds):
            mine.append((wansample_seconds(2 * a.iters) - wansample_seconds(a.iters)) / a.iters)
            theirs.append((diffusers_seconds(2 * a.iters) - diffusers_seconds(a.iters)) / a.iters)
        w, t = statistics.median(mine), statistics.median(theirs)
        print(f"{name:<22} {w:>16.4f} {t:>16.4f} {t / w:>7.2f}x", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("compare-sample", help="wansample's seconds per step and WanPipeline's, with the ratio")
    c.add_argument("--model-configs", default="data/configs/wan-small.json,data/configs/wan-mid.json")
    c.add_argument("--frames", type=int, default=5, help="latent frames")
    c.add_argument("--size", default="32x32", help="latent HxW")
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--iters", type=int, default=4, help="N: runs of N and 2N steps")
    c.add_argument("--rounds", type=int, default=3, help="alternating rounds (the median is reported)")
    c.add_argument("--wansample", default="build/release/apps/wansample/wansample")
    c.add_argument("--scratch", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "vs_diffusers"))
    a = p.parse_args()
    run_compare_sample(a)


if __name__ == "__main__":
    main()
