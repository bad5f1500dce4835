#!/usr/bin/python3
"""Step caching's quality against its savings: each method at a range of
thresholds, against the uncached sample of the same model, noise and text.

  step_cache_quality.py --weights W --model-config C --data D --vae V [options]

For each sample index of --data: wansample draws the uncached sample (its
latents and the --vae's decoded frames), then each --methods at each of its
thresholds (teacache and magcache read the calibration that
`wansample --calibrate-cache INDICES` fits first, on --calibrate samples that
are not measured). The time a cached sample saves is wanbench sample
--cache's to measure (here the VAE's decode takes most of it). Prints one markdown row per method and threshold: the
model evaluations that ran (of all), the saving in evaluations, and the PSNR (dB, against the uncached one's range for the latents,
255 for the frames) and correlation of the latents and of the decoded
frames, means over the samples.
"""
import argparse
import glob
import math
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np
from PIL import Image

DEFAULTS = {"teacache": [0.04, 0.08, 0.15, 0.3], "magcache": [0.06, 0.12, 0.24, 0.5],
            "easycache": [0.025, 0.05, 0.1, 0.2]}
DEFAULT_THRESHOLD = {"teacache": 0.08, "magcache": 0.12, "easycache": 0.05}


def psnr(a, b, peak):
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(peak * peak / mse)


def corr(a, b):
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def frames(directory):
    return np.stack([np.asarray(Image.open(p), dtype=np.float64) for p in sorted(glob.glob(directory + "/*.png"))])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wansample", default="build/release/apps/wansample/wansample")
    p.add_argument("--weights", required=True)
    p.add_argument("--model-config", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--vae", required=True)
    p.add_argument("--indices", default="0,1,2", help="the samples measured")
    p.add_argument("--calibrate", default="3,4,5", help="the samples the calibration is fitted on")
    p.add_argument("--methods", default="teacache,magcache,easycache")
    p.add_argument("--args", default="--steps 50 --shift 20 --cfg 2", help="wansample's other options")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="step-cache-")
    base = [a.wansample, "--weights", a.weights, "--model-config", a.model_config, "--data", a.data] + a.args.split()
    calibration = os.path.join(work, "cache.json")
    subprocess.run(base + ["--calibrate-cache", a.calibrate, "--out", calibration], check=True,
                   stdout=subprocess.DEVNULL)

    def draw(index, extra, tag):
        out = os.path.join(work, tag)
        os.makedirs(out, exist_ok=True)
        log = subprocess.run(base + ["--index", str(index), "--out", out + "/s.h5", "--vae", a.vae, "--frames-dir",
                                     out + "/frames"] + extra, check=True, capture_output=True, text=True).stdout
        m = re.search(r"step cache: (\d+) of (\d+) model evaluations ran", log)
        with h5py.File(out + "/s.h5") as f:
            latents = f["latents"][0].astype(np.float64)
        return latents, frames(out + "/frames"), (int(m[1]), int(m[2])) if m else None

    indices = [int(i) for i in a.indices.split(",")]
    plain = {i: draw(i, [], f"plain-{i}") for i in indices}
    print("| method | threshold | evaluations ran | fewer | latents PSNR (dB) | latents corr. "
          "| frames PSNR (dB) | frames corr. |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    evals = 2 * int(re.search(r"--steps (\d+)", a.args)[1]) if "--steps" in a.args else 100
    print(f"| none | | {evals} of {evals} | 1.00x | | | | |")
    for method in a.methods.split(","):
        for threshold in DEFAULTS[method]:
            rows = []
            for i in indices:
                extra = ["--cache", method, "--cache-threshold", str(threshold)]
                if method != "easycache":
                    extra += ["--cache-calibration", calibration]
                latents, video, (ran, total) = draw(i, extra, f"{method}-{threshold}-{i}")
                ref_latents, ref_video = plain[i][0], plain[i][1]
                rows.append((ran, total, psnr(latents, ref_latents, ref_latents.max() - ref_latents.min()),
                             corr(latents, ref_latents), psnr(video, ref_video, 255.0), corr(video, ref_video)))
            r = np.array(rows, dtype=np.float64)
            mark = " (default)" if threshold == DEFAULT_THRESHOLD[method] else ""
            print(f"| {method}{mark} | {threshold} | {r[:, 0].mean():.1f} of {r[0, 1]:.0f} | "
                  f"{r[:, 1].mean() / r[:, 0].mean():.2f}x | {r[:, 2].mean():.1f} | {r[:, 3].mean():.4f} | "
                  f"{r[:, 4].mean():.1f} | {r[:, 5].mean():.4f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
