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

  vs_diffusers.py compare-train [options]
      A LoRA training step of the 1.3B architecture cut to --layers blocks
      (data/configs/wan2.1-t2v-1.3b.json), on --ranks ranks with --threads
      threads each: `wantrain` with data/lora.ini's adapters (rank and alpha
      32 on the 10 Linears of each block, bf16 base, bf16 autocast) on a
      synthetic dataset of latents [16, --frames, --size] and 512 context
      positions of width 4096 (the step times its metrics.jsonl logs),
      against diffusers' WanTransformer3DModel of the same shape with the
      same adapters through peft (LoraConfig on to_q, to_k, to_v, to_out.0 of
      both attentions and the two FFN Linears), bf16 base, bf16 autocast,
      under PyTorch DistributedDataParallel (gloo) with AdamW: the same flow
      matching step (`train-peer`, run under mpirun). Both sides without
      activation checkpointing. Alternated for --rounds rounds; prints the
      median seconds per step of each and the ratio (diffusers / wantrain).

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
from vs_torch import mpirun  # noqa: E402  (under mpirun, as root on 2 cores)

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


LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]  # diffusers' names of lora.ini's


def rank_and_world():
    return (int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))),
            int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1"))))


def run_train_peer(a):
    """diffusers + peft under DDP: the same LoRA flow-matching step, median seconds per step on rank 0."""
    import torch.distributed as dist
    from peft import LoraConfig
    from torch.nn.parallel import DistributedDataParallel

    rank, world = rank_and_world()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=world)
    with open(a.model_config) as f:
        ours = json.load(f)
    torch.manual_seed(0)
    model = WanTransformer3DModel(**diffusers_config(ours)).to(torch.bfloat16)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=a.rank, lora_alpha=a.rank, init_lora_weights="gaussian",
                                 target_modules=LORA_TARGETS))
    trained = [p for p in model.parameters() if p.requires_grad]
    for p in trained:  # adapters in fp32, as wantrain keeps them
        p.data = p.data.float()
    model = DistributedDataParallel(model, bucket_cap_mb=25)
    optimizer = torch.optim.AdamW(trained, lr=1e-4, betas=(0.9, 0.999), weight_decay=0.01)
    height, width = (int(v) for v in a.size.split("x"))
    g = torch.Generator().manual_seed(1 + rank)
    x0 = torch.randn(1, ours["in_dim"], a.frames, height, width, generator=g)
    context = torch.zeros(1, 512, ours["text_dim"])  # WanPipeline's 512 positions, the text's first
    context[:, :16] = torch.randn(1, 16, ours["text_dim"], generator=g)
    shift = 5.0

    def step():
        sigma = torch.rand(1)
        sigma = shift * sigma / (1 + (shift - 1) * sigma)
        eps = torch.randn_like(x0)
        s = sigma.view(-1, 1, 1, 1, 1)
        x_t = (1 - s) * x0 + s * eps
        keep = (torch.rand(1) >= 0.1).view(-1, 1, 1)
        ctx = torch.where(keep, context, torch.zeros_like(context))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            prediction = model(hidden_states=x_t, timestep=sigma * 1000, encoder_hidden_states=ctx,
                               return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(prediction.float(), eps - x0)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.iters):
        dist.barrier()
        start = time.perf_counter()
        step()
        elapsed = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's step
        times.append(elapsed.item())
    if rank == 0:
        print(json.dumps({"step_s": statistics.median(times), "trained": sum(p.numel() for p in trained)}),
              flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # gloo's teardown at exit can hang under mpirun


def run_compare_train(a):
    apps = a.apps
    for tool in ("wantrain/wantrain", "wandata/wandata"):
        if not os.path.exists(os.path.join(apps, tool)):
            sys.exit(f"vs_diffusers: no {tool} under {apps} (build first, or give --apps)")
    os.makedirs(a.scratch, exist_ok=True)
    with open("data/configs/wan2.1-t2v-1.3b.json") as f:
        ours = json.load(f)
    ours["num_layers"] = a.layers
    config = os.path.join(a.scratch, f"wan2.1-t2v-1.3b-{a.layers}-blocks.json")
    with open(config, "w") as f:
        json.dump(ours, f)
    data = os.path.join(a.scratch, "data")
    if not os.path.isdir(data):
        subprocess.run([os.path.join(apps, "wandata/wandata"), "synth", "--out", data, "--samples", "8", "--shards",
                        "2", "--frames", str(a.frames), "--size", a.size, "--text-len", "16", "--text-dim", "4096",
                        "--seed", "1"], check=True, capture_output=True)
    height, width = (int(v) for v in a.size.split("x"))
    tokens = a.frames * (height // 2) * (width // 2)
    print(f"# a LoRA training step (rank {a.rank} on 10 Linears a block, bf16 base and autocast) of the 1.3B "
          f"architecture with {a.layers} blocks, latents [16, {a.frames}, {height}, {width}] ({tokens} tokens), "
          f"512 context positions; {a.ranks} ranks x {a.threads} thread(s), batch 1 per rank; median of "
          f"{a.rounds} alternating rounds")
    print(f"{'wantrain s/step':>16} {'diffusers+peft s/step':>22} {'ratio':>8}")
    steps = a.warmup + a.iters
    mine, theirs = [], []
    port = 29700
    for r in range(a.rounds):
        run = os.path.join(a.scratch, "run")
        subprocess.run(["rm", "-rf", run], check=True)
        mpirun(a.ranks, [os.path.join(apps, "wantrain/wantrain"), "--config", "data/lora.ini", "--model-config",
                         config, "--lora-rank", str(a.rank), "--lora-alpha", str(a.rank), "--data", data,
                         "--output-dir", run, "--threads", str(a.threads), "--steps", str(steps), "--log-every", "1",
                         "--warmup-steps", "0", "--grad-checkpoint", "none", "--attention-chunk", "fused",
                         "--save-every", "0"])
        with open(os.path.join(run, "metrics.jsonl")) as f:
            logged = [json.loads(line) for line in f]
        step_s = [m["step_s"] for m in logged if "loss" in m and "step_s" in m][a.warmup:]
        mine.append(statistics.median(step_s))
        port += 1
        out = mpirun(a.ranks, [sys.executable, os.path.abspath(__file__), "train-peer", "--model-config", config,
                               "--frames", str(a.frames), "--size", a.size, "--rank", str(a.rank), "--threads",
                               str(a.threads), "--iters", str(a.iters), "--warmup", str(a.warmup), "--port",
                               str(port)])
        theirs.append(json.loads(out.strip().splitlines()[-1])["step_s"])
        print(f"# round {r + 1}: wantrain {mine[-1]:.3f} s, diffusers+peft {theirs[-1]:.3f} s", flush=True)
    w, t = statistics.median(mine), statistics.median(theirs)
    print(f"{w:>16.3f} {t:>22.3f} {t / w:>7.2f}x", flush=True)


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
    for q in (sub.add_parser("compare-train", help="wantrain's LoRA step and diffusers+peft's under DDP"),
              sub.add_parser("train-peer", help="the diffusers+peft DDP side, under mpirun")):
        q.add_argument("--frames", type=int, default=5, help="latent frames (17 video frames: 5)")
        q.add_argument("--size", default="32x32", help="latent HxW (256x256 pixels: 32x32)")
        q.add_argument("--rank", type=int, default=32, help="LoRA rank (alpha the same)")
        q.add_argument("--threads", type=int, default=1, help="threads per rank")
        q.add_argument("--iters", type=int, default=3, help="timed steps (the median is reported)")
        q.add_argument("--warmup", type=int, default=1, help="untimed steps first")
        if q.prog.endswith("compare-train"):
            q.add_argument("--layers", type=int, default=8, help="blocks of the 1.3B architecture")
            q.add_argument("--ranks", type=int, default=2)
            q.add_argument("--rounds", type=int, default=2, help="alternating rounds (the median is reported)")
            q.add_argument("--apps", default="build/release/apps")
            q.add_argument("--scratch", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "vs_diffusers_train"))
        else:
            q.add_argument("--model-config", required=True)
            q.add_argument("--port", type=int, default=29700, help="gloo's rendezvous port on 127.0.0.1")
    a = p.parse_args()
    {"compare-sample": run_compare_sample, "compare-train": run_compare_train, "train-peer": run_train_peer}[a.mode](a)


if __name__ == "__main__":
    main()
