#!/usr/bin/python3
"""wantrain against PyTorch DDP on the same math, side by side.

Four modes:

  vs_torch.py peer --model-config JSON [options]
      Run under mpirun (one process per rank): an independent PyTorch
      implementation of the Wan2.1 DiT (the structure of the official
      wan/modules/model.py: Conv3d patches, sinusoidal time embedding in
      float64, 3-D RoPE through complex numbers, RMSNorm'd q/k, modulation)
      trained with flow matching under DistributedDataParallel (gloo) and
      torch.optim.AdamW, on a random in-memory batch: what `wanbench step`
      times for wantrain. Rank 0 prints one JSON line: the median seconds
      per step.

  vs_torch.py compare [options]
      For each model config, world size and precision, runs `wanbench step`
      (wantrain's Engine, "with Reducer") and the peer above, alternating
      them for --rounds rounds, and prints the median seconds per step of
      each and their ratio (PyTorch / wantrain: above 1 means wantrain is
      faster). The 1-rank row is per-rank compute.

  vs_torch.py sample-peer --model-config JSON [options]
      The sampling loop of the official text2video.py over the same PyTorch
      DiT, in eval mode without autograd: per step the conditional and the
      unconditional forward (the context padded to text_len, as the
      official T5 hands it over), guidance, and the solver's update (a
      flow-matching step: its few element-wise ops cost the same as
      UniPC's next to two forwards). Prints the median seconds per step.

  vs_torch.py compare-sample [options]
      For each model config, `wansample` (UniPC, guidance 5) at --steps N
      and 2N, its seconds per step the difference over N (start-up and
      weights loading cancel), against sample-peer, alternated for --rounds
      rounds, with their ratio (PyTorch / wantrain).

The same training step on both sides: flow matching with sigma ~ U(0,1) shifted by 5,
caption dropout 0.1 to the zero context, MSE against eps - x0 in fp32,
gradients averaged over ranks in buckets of 25 MiB (1 MiB first), global-norm
clipping to 1, AdamW (lr 1e-4, betas 0.9/0.999, weight decay 0.01), fp32
weights, optionally bf16 autocast. Neither side reads data from disk.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_python import ensure_torch  # noqa: E402

ensure_torch()


# ---------------------------------------------------------------- the peer

def build_model(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    dim, heads, eps = cfg["dim"], cfg["num_heads"], cfg["eps"]
    head_dim = dim // heads

    def rope_params(max_len, d, theta=10000):
        freqs = torch.outer(torch.arange(max_len), 1.0 / torch.pow(theta, torch.arange(0, d, 2).to(torch.float64).div(d)))
        return torch.polar(torch.ones_like(freqs), freqs)

    def rope_apply(x, grid, freqs):  # x [B, S, n, d]; as the official model: complex float64
        n, c = x.size(2), x.size(3) // 2
        parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
        f, h, w = grid
        s = f * h * w
        xc = torch.view_as_complex(x[:, :s].to(torch.float64).reshape(x.size(0), s, n, -1, 2))
        fr = torch.cat([parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                        parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                        parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1)], dim=-1).reshape(s, 1, -1)
        return torch.view_as_real(xc * fr).flatten(3).float()

    def attention(q, k, v):  # [B, L, n, d], [B, S, n, d]: fused, as the official flash_attention
        q, k, v = (u.transpose(1, 2) for u in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2)

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * self.weight

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
            self.norm_q, self.norm_k = RMSNorm(dim), RMSNorm(dim)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.cross_attn = Attention(), Attention()
            self.norm3 = nn.LayerNorm(dim, eps=eps)
            self.ffn = nn.Sequential(nn.Linear(dim, cfg["ffn_dim"]), nn.GELU(approximate="tanh"),
                                     nn.Linear(cfg["ffn_dim"], dim))
            self.modulation = nn.Parameter(torch.randn(1, 6, dim) / dim**0.5)

        def forward(self, x, e0, grid, freqs, ctx):
            b, s = x.shape[:2]
            m = (self.modulation + e0).chunk(6, dim=1)
            y = F.layer_norm(x, (dim,), eps=eps) * (1 + m[1]) + m[0]
            sa = self.self_attn
            q, k, v = sa.norm_q(sa.q(y)), sa.norm_k(sa.k(y)), sa.v(y)
            q, k, v = (u.view(b, s, heads, head_dim) for u in (q, k, v))
            y = attention(rope_apply(q, grid, freqs), rope_apply(k, grid, freqs), v).flatten(2)
            x = x + sa.o(y) * m[2]
            ca = self.cross_attn
            y = self.norm3(x)
            q, k, v = ca.norm_q(ca.q(y)), ca.norm_k(ca.k(ctx)), ca.v(ctx)
            y = attention(q.view(b, s, heads, head_dim), k.view(b, -1, heads, head_dim),
                          v.view(b, -1, heads, head_dim)).flatten(2)
            x = x + ca.o(y)
            y = self.ffn(F.layer_norm(x, (dim,), eps=eps) * (1 + m[4]) + m[3])
            return x + y * m[5]

    class WanDiT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = cfg["patch_size"]
            self.patch_embedding = nn.Conv3d(cfg["in_dim"], dim, kernel_size=self.patch, stride=self.patch)
            self.text_embedding = nn.Sequential(nn.Linear(cfg["text_dim"], dim), nn.GELU(approximate="tanh"),
                                                nn.Linear(dim, dim))
            self.time_embedding = nn.Sequential(nn.Linear(cfg["freq_dim"], dim), nn.SiLU(), nn.Linear(dim, dim))
            self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["num_layers"]))
            self.head = nn.Linear(dim, cfg["out_dim"] * math.prod(self.patch))
            self.head_modulation = nn.Parameter(torch.randn(1, 2, dim) / dim**0.5)
            self.freqs = torch.cat([rope_params(1024, head_dim - 4 * (head_dim // 6)),
                                    rope_params(1024, 2 * (head_dim // 6)), rope_params(1024, 2 * (head_dim // 6))], 1)

        def forward(self, x, t, context):
            x = self.patch_embedding(x)
            grid = list(x.shape[2:])
            x = x.flatten(2).transpose(1, 2)
            half = cfg["freq_dim"] // 2
            sinusoid = torch.outer(t.to(torch.float64),
                                   torch.pow(10000, -torch.arange(half, dtype=torch.float64).div(half)))
            e = self.time_embedding(torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1).float())
            e0 = self.time_projection(e).unflatten(1, (6, dim))
            ctx = self.text_embedding(context)
            for block in self.blocks:
                x = block(x, e0, grid, self.freqs, ctx)
            shift, scale = (self.head_modulation + e.unsqueeze(1)).chunk(2, dim=1)
            x = self.head(F.layer_norm(x, (dim,), eps=eps) * (1 + scale) + shift)
            c, (f, h, w), (pf, ph, pw) = cfg["out_dim"], grid, self.patch
            x = x.view(x.size(0), f, h, w, pf, ph, pw, c)
            return torch.einsum("bfhwpqrc->bcfphqwr", x).reshape(x.size(0), c, f * pf, h * ph, w * pw)

    return WanDiT()


def run_peer(a):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    if cuda:  # one GPU per rank, NCCL between them
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
    device = torch.device(f"cuda:{torch.cuda.current_device()}" if cuda else "cpu")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                            world_size=world)
    with open(a.model_config) as f:
        cfg = json.load(f)
    torch.manual_seed(0)
    model = DistributedDataParallel(build_model(torch, cfg).to(device), bucket_cap_mb=25,
                                    device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=0.01)
    height, width = (int(v) for v in a.size.split("x"))
    g = torch.Generator().manual_seed(1 + rank)
    x0 = torch.randn(a.batch_size, cfg["in_dim"], a.frames, height, width, generator=g).to(device)
    context = torch.randn(a.batch_size, cfg["text_len"], cfg["text_dim"], generator=g).to(device)
    shift = 5.0

    def step():
        sigma = torch.rand(a.batch_size, device=device)
        sigma = shift * sigma / (1 + (shift - 1) * sigma)
        eps = torch.randn_like(x0)
        s = sigma.view(-1, 1, 1, 1, 1)
        x_t = (1 - s) * x0 + s * eps
        keep = (torch.rand(a.batch_size, device=device) >= 0.1).view(-1, 1, 1)
        ctx = torch.where(keep, context, torch.zeros_like(context))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            prediction = model(x_t, sigma * 1000, ctx)
        loss = torch.nn.functional.mse_loss(prediction.float(), eps - x0)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    times = []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(a.iters):
        dist.barrier()
        start = time.perf_counter()
        step()  # loss.item() waits for the GPU
        elapsed = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's step, as wanbench reports
        times.append(elapsed.item())
    if rank == 0:
        result = {"step_s": statistics.median(times), "ranks": world,
                  "parameters": sum(p.numel() for p in model.parameters())}
        if cuda:
            result["peak_device_gib"] = torch.cuda.max_memory_allocated() / 2**30
        print(json.dumps(result), flush=True)
    dist.barrier()
    # gloo's teardown at interpreter exit can hang under mpirun: every rank
    # is done and its output flushed, so leave at once.
    sys.stdout.flush()
    os._exit(0)


def run_sample_peer(a):
    import torch

    torch.set_num_threads(a.threads)
    with open(a.model_config) as f:
        cfg = json.load(f)
    torch.manual_seed(0)
    model = build_model(torch, cfg).eval()
    height, width = (int(v) for v in a.size.split("x"))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, cfg["in_dim"], a.frames, height, width, generator=g)
    context = torch.zeros(1, cfg["text_len"], cfg["text_dim"])
    context[:, :16] = torch.randn(1, 16, cfg["text_dim"], generator=g)  # a prompt of 16 tokens, zero-padded
    null = torch.zeros_like(context)
    guide, shift = 5.0, 5.0
    sigmas = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / (a.iters + a.warmup) for i in range(a.iters + a.warmup + 1))]
    times = []
    with torch.no_grad():
        for i in range(a.iters + a.warmup):
            start = time.perf_counter()
            t = torch.tensor([sigmas[i] * 1000])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                cond = model(x, t, context).float()
                uncond = model(x, t, null).float()
            v = uncond + guide * (cond - uncond)
            x = x + (sigmas[i + 1] - sigmas[i]) * v
            if i >= a.warmup:
                times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": statistics.median(times)}), flush=True)


# ---------------------------------------------------------------- compare

def mpirun(np_, args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(["mpirun", "-np", str(np_), "--oversubscribe"] + args, env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"{os.path.basename(sys.argv[0]).removesuffix('.py')}: {' '.join(args[:3])} ... failed "
                 f"(status {out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


def last_json(text):
    """The JSON a run printed: the peer's one line, or wanbench --json's indented object."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{") and line.endswith("}"):
            return json.loads(line)
    return json.loads(text[text.index("\n{") + 1 if not text.startswith("{") else 0:])


def run_compare(a):
    wanbench = a.wanbench
    if not os.path.exists(wanbench):
        sys.exit(f"vs_torch: no wanbench at {wanbench} (build first, or give --wanbench)")
    rows = []
    port = 29600
    for config in a.model_configs.split(","):
        for ranks in (int(r) for r in a.ranks.split(",")):
            for precision in a.precisions.split(","):
                shape = ["--batch-size", str(a.batch_size), "--frames", str(a.frames), "--size", a.size]
                ours, theirs = [], []
                for _ in range(a.rounds):  # alternating: both see the machine in the same state
                    out = mpirun(ranks, [wanbench, "step", "--model-config", config, *shape, "--precision", precision,
                                         "--threads", str(a.threads), "--iters", str(a.iters), "--rounds", "1",
                                         "--warmup", "1", "--sync-iters", "1", "--json"])
                    ours.append(last_json(out)["with_reducer"]["step_s"])
                    port += 1
                    out = mpirun(ranks, [sys.executable, os.path.abspath(__file__), "peer", "--model-config", config,
                                         *shape, "--precision", precision, "--threads", str(a.threads), "--iters",
                                         str(a.iters), "--warmup", "1", "--port", str(port)])
                    theirs.append(last_json(out)["step_s"])
                w, t = statistics.median(ours), statistics.median(theirs)
                rows.append((os.path.basename(config), ranks, precision, w, t, t / w))
                print(f"{rows[-1][0]:<22} {ranks:>5} {precision:>9} {w:>14.4f} {t:>14.4f} {t / w:>8.2f}x", flush=True)
    return rows


def run_compare_sample(a):
    """wansample's seconds per step (from N and 2N steps) against sample-peer's."""
    wansample = a.wansample
    if not os.path.exists(wansample):
        sys.exit(f"vs_torch: no wansample at {wansample} (build first, or give --wansample)")
    scratch = a.scratch
    os.makedirs(scratch, exist_ok=True)
    import h5py  # noqa: E402 (the venv's)
    import numpy
    rows = []
    for config in a.model_configs.split(","):
        name = os.path.basename(config).removesuffix(".json")
        weights = os.path.join(scratch, name + ".safetensors")
        subprocess.run([sys.executable, os.path.join(HERE, "sparse_wan_weights.py"), config, weights, "--dtype", "F32"],
                       check=True)
        with open(config) as f:
            text_dim = json.load(f)["text_dim"]
        text = os.path.join(scratch, "text-%d.h5" % text_dim)
        with h5py.File(text, "w") as f:
            f["text_emb"] = numpy.random.default_rng(0).standard_normal((16, text_dim), dtype=numpy.float32)
        ours, theirs = [], []
        for _ in range(a.rounds):
            seconds = []
            for steps in (a.iters, 2 * a.iters):
                start = time.perf_counter()
                out = subprocess.run([wansample, "--weights", weights, "--model-config", config, "--text", text,
                                      "--frames", str(a.frames), "--size", a.size, "--steps", str(steps), "--cfg", "5",
                                      "--precision", a.precision, "--weights-dtype", "fp32", "--threads",
                                      str(a.threads), "--out", os.path.join(scratch, "out.h5")],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"vs_torch: wansample failed:\n{out.stdout}{out.stderr}")
                seconds.append(time.perf_counter() - start)
            ours.append((seconds[1] - seconds[0]) / a.iters)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "sample-peer", "--model-config", config,
                                  "--frames", str(a.frames), "--size", a.size, "--precision", a.precision,
                                  "--threads", str(a.threads), "--iters", str(a.iters), "--warmup", "1"],
                                 capture_output=True, text=True, check=True)
            theirs.append(last_json(out.stdout)["step_s"])
        w, t = statistics.median(ours), statistics.median(theirs)
        rows.append((name, w, t, t / w))
        print(f"{name:<22} {a.precision:>9} {w:>14.4f} {t:>14.4f} {t / w:>8.2f}x", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    peer = sub.add_parser("peer", help="the PyTorch DDP side, under mpirun")
    compare = sub.add_parser("compare", help="wanbench step and the peer, alternated, with ratios")
    for q in (peer, compare):
        q.add_argument("--batch-size", type=int, default=4)
        q.add_argument("--frames", type=int, default=1)
        q.add_argument("--size", default="32x32", help="latent HxW")
        q.add_argument("--threads", type=int, default=1, help="CPU threads per rank")
        q.add_argument("--iters", type=int, default=5, help="timed steps (the median is reported)")
    peer.add_argument("--model-config", required=True)
    peer.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    peer.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: one GPU per rank, NCCL")
    peer.add_argument("--warmup", type=int, default=1)
    peer.add_argument("--port", type=int, default=29500, help="gloo's rendezvous port on 127.0.0.1")
    compare.add_argument("--model-configs", default="data/configs/wan-tiny.json,data/configs/wan-mid.json,"
                                                    "data/configs/wan-small.json")
    compare.add_argument("--ranks", default="1,2")
    compare.add_argument("--precisions", default="fp32,bf16")
    compare.add_argument("--rounds", type=int, default=3, help="alternating rounds (the median is reported)")
    compare.add_argument("--wanbench", default="build/release/apps/wanbench/wanbench")
    sample_peer = sub.add_parser("sample-peer", help="the official sampling loop over the PyTorch DiT")
    compare_sample = sub.add_parser("compare-sample", help="wansample's seconds per step and sample-peer's, with ratios")
    for q in (sample_peer, compare_sample):
        q.add_argument("--frames", type=int, default=5, help="latent frames")
        q.add_argument("--size", default="32x32", help="latent HxW")
        q.add_argument("--threads", type=int, default=2)
        q.add_argument("--iters", type=int, default=4, help="timed steps (wansample: N and 2N)")
        q.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    sample_peer.add_argument("--model-config", required=True)
    sample_peer.add_argument("--warmup", type=int, default=1)
    compare_sample.add_argument("--model-configs", default="data/configs/wan-small.json,data/configs/wan-mid.json")
    compare_sample.add_argument("--rounds", type=int, default=3, help="alternating rounds (the median is reported)")
    compare_sample.add_argument("--wansample", default="build/release/apps/wansample/wansample")
    compare_sample.add_argument("--scratch", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "vs_torch_sample"))
    a = p.parse_args()
    if a.mode == "peer":
        run_peer(a)
        return
    if a.mode == "sample-peer":
        run_sample_peer(a)
        return
    if a.mode == "compare-sample":
        print(f"# wansample (UniPC, cfg 5) against the official sampling loop over a PyTorch DiT, latents "
              f"[16,{a.frames},{a.size.replace('x', ',')}], {a.threads} thread(s), median of {a.rounds} alternating "
              f"rounds of {a.iters} steps")
        print(f"{'model config':<22} {'precision':>9} {'wansample s/step':>14} {'PyTorch s/step':>14} {'ratio':>8}")
        run_compare_sample(a)
        return
    print(f"# wantrain (wanbench step, with Reducer) against PyTorch DDP (gloo), batch {a.batch_size} per rank, "
          f"latents [16,{a.frames},{a.size.replace('x', ',')}], {a.threads} thread(s) per rank, median of "
          f"{a.rounds} alternating rounds of {a.iters} steps")
    print(f"{'model config':<22} {'ranks':>5} {'precision':>9} {'wantrain s/step':>14} {'PyTorch s/step':>14} "
          f"{'ratio':>8}")
    run_compare(a)


if __name__ == "__main__":
    main()
