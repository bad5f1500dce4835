#!/usr/bin/env python3
# plot_metrics.py: draws one 1600x1000 PNG summarising a wantrain run from
# RUN_DIR/metrics.jsonl (and RUN_DIR/samples/metrics.jsonl of --sample-ranks),
# as a 2x3 grid: training and validation loss, learning
# rate, samples/s, the step-time split (stacked data/teacher/forward/backward/
# comm/optimizer seconds), sample correlation against the ground truth, and
# peak RSS (and peak device memory) per rank.
#
# Called by `wantrain plot RUN_DIR [--out FILE] [--log-scale]`, which runs
#   /usr/bin/python3 scripts/plot_metrics.py RUN_DIR --out FILE [--log-scale]
# (Debian's python3-matplotlib). Can also be run by hand the same way.
#
# Exit status: 0 on success (one line on stdout), 2 on a bad run directory,
# metrics file or output path (one line on stderr starting "wantrain plot: "),
# 1 when matplotlib cannot be imported.

import argparse
import json
import math
import os
import sys

PROG = "wantrain plot"
WIDTH, HEIGHT, DPI = 16, 10, 100

# Fields of a step line that must be numbers when present (null is read as NaN,
# since the C++ JSON writer writes a non-finite double as null).
STEP_NUMBER_FIELDS = (
    "step", "epoch", "loss", "lr", "grad_norm", "samples_per_s", "step_s", "data_s",
    "teacher_s", "forward_s", "backward_s", "comm_s", "optimizer_s", "skipped_steps",
    "peak_rss_mib", "eta_s", "loss_scale",
)
STEP_LIST_FIELDS = ("peak_rss_mib_per_rank", "peak_device_mib_per_rank")
TIME_FIELDS = (
    ("data_s", "data"), ("teacher_s", "teacher"), ("forward_s", "forward"),
    ("backward_s", "backward"), ("comm_s", "comm"), ("optimizer_s", "optimizer"),
)


class PlotError(Exception):
    """A known error: reported as one line on stderr, exit status 2."""


def is_number(v):
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def num(v):
    return math.nan if v is None else float(v)


def check_numbers(obj, fields, where):
    for key in fields:
        if key in obj and not is_number(obj[key]):
            raise PlotError(f"{where}: field '{key}' is not a number")


def read_metrics(path, needs_steps=True):
    """Returns (steps, validations, samples), each a list of dicts sorted by step."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PlotError(f"{path}: cannot read: {e.strerror or e}")
    lines = data.split(b"\n")
    # The text after the last newline is a line still being written (or a
    # complete last line without its newline): use it only if it parses.
    partial = lines.pop()
    steps, vals, samples = [], [], []
    entries = [(i + 1, line, False) for i, line in enumerate(lines)]
    if partial.strip():
        entries.append((len(lines) + 1, partial, True))
    for lineno, raw, is_partial in entries:
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            obj = None
        if not isinstance(obj, dict):
            if is_partial:
                continue
            raise PlotError(f"{where}: not a JSON object")
        if "loss" in obj and "step_s" in obj:
            check_numbers(obj, STEP_NUMBER_FIELDS, where)
            for key in STEP_LIST_FIELDS:
                if key in obj:
                    v = obj[key]
                    if not isinstance(v, list) or not all(is_number(x) for x in v):
                        raise PlotError(f"{where}: field '{key}' is not a list of numbers")
            if obj.get("step") is None:
                raise PlotError(f"{where}: field 'step' is not a number")
            steps.append(obj)
        elif "val_loss" in obj:
            check_numbers(obj, ("step", "val_loss"), where)
            if obj.get("step") is not None:
                vals.append(obj)
        elif "sample_correlation" in obj:
            check_numbers(obj, ("step", "sample_correlation", "sample_mse", "sample_s"), where)
            if obj.get("step") is not None:
                samples.append(obj)
        # anything else (the final summary line, future kinds) is ignored
    if not steps and needs_steps:
        raise PlotError(f"{path}: no training steps logged yet")
    key = lambda o: num(o["step"])
    return sorted(steps, key=key), sorted(vals, key=key), sorted(samples, key=key)


def column(rows, key):
    return [num(r.get(key)) for r in rows]


def per_rank(rows, key):
    """{rank: list over rows} for a per-rank list field; NaN where a row lacks the rank."""
    n = max((len(r[key]) for r in rows if isinstance(r.get(key), list)), default=0)
    out = {}
    for rank in range(n):
        out[rank] = [num(r[key][rank]) if isinstance(r.get(key), list) and rank < len(r[key])
                     else math.nan for r in rows]
    return out


def plot(run_dir, out, log_scale, steps, vals, samples, plt):
    x = column(steps, "step")
    fig, axes = plt.subplots(2, 3, figsize=(WIDTH, HEIGHT), dpi=DPI)
    last_step = int(max(v for v in x if not math.isnan(v))) if any(not math.isnan(v) for v in x) else 0
    fig.suptitle(f"{run_dir}: {last_step} steps", fontsize=14)

    # 1. loss
    ax = axes[0][0]
    ax.plot(x, column(steps, "loss"), label="training loss (mean over the log interval)")
    if vals:
        ax.plot(column(vals, "step"), column(vals, "val_loss"), "o-", markersize=5,
                label="validation loss")
    if log_scale:
        ax.set_yscale("log")
    ax.set_title("loss" + (" (log scale)" if log_scale else ""))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(loc="upper right", fontsize=9)

    # 2. learning rate
    ax = axes[0][1]
    ax.plot(x, column(steps, "lr"), color="tab:orange")
    ax.set_title("learning rate")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))

    # 3. throughput
    ax = axes[0][2]
    ax.plot(x, column(steps, "samples_per_s"), color="tab:green")
    ax.set_title("throughput")
    ax.set_xlabel("step")
    ax.set_ylabel("samples/s")
    ax.set_ylim(bottom=0)

    # 4. step-time split
    ax = axes[1][0]
    ys, labels = [], []
    for key, label in TIME_FIELDS:
        col = [0.0 if math.isnan(v) else v for v in column(steps, key)]
        if key == "teacher_s" and not any(col):
            continue
        ys.append(col)
        labels.append(label)
    ax.stackplot(x, ys, labels=labels, alpha=0.85)
    ax.set_title("step time split")
    ax.set_xlabel("step")
    ax.set_ylabel("seconds per step")
    totals = [sum(v) for v in zip(*ys)] if ys else []
    top = max((t for t in totals if not math.isnan(t)), default=0.0)
    ax.set_ylim(0, top * 1.4 if top > 0 else 1.0)  # headroom for the legend above the stack
    ax.legend(loc="upper center", fontsize=9, ncol=3)

    # 5. sample correlation
    ax = axes[1][1]
    if samples:
        ax.plot(column(samples, "step"), column(samples, "sample_correlation"), "o-",
                color="tab:purple", markersize=5)
        ax.set_title("sample correlation against the ground truth")
        ax.set_xlabel("step")
        ax.set_ylabel("correlation")
    else:
        ax.text(0.5, 0.5, "no samples (wantrain --sample-every N)", ha="center", va="center",
                transform=ax.transAxes, fontsize=12, color="gray")
        ax.set_axis_off()

    # 6. memory
    ax = axes[1][2]
    rss = per_rank(steps, "peak_rss_mib_per_rank")
    if not rss and any("peak_rss_mib" in r for r in steps):
        rss = {0: column(steps, "peak_rss_mib")}
    dev = per_rank(steps, "peak_device_mib_per_rank")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for rank, col in rss.items():
        ax.plot(x, col, color=colors[rank % len(colors)], label=f"rank {rank}")
    for rank, col in dev.items():
        ax.plot(x, col, "--", color=colors[rank % len(colors)], label=f"rank {rank} device")
    ax.set_title("peak memory" + (" (solid: RSS, dashed: device)" if dev else " (RSS)"))
    ax.set_xlabel("step")
    ax.set_ylabel("MiB")
    if rss or dev:
        values = [v for col in list(rss.values()) + list(dev.values()) for v in col if v is not None and v == v]
        ax.set_ylim(0, max(values) * 1.15 if values and max(values) > 0 else 1.0)  # lines clear of the frame
        ax.legend(loc="best", fontsize=9, ncol=2 if len(rss) + len(dev) > 8 else 1)
    else:
        ax.text(0.5, 0.5, "no memory figures logged", ha="center", va="center",
                transform=ax.transAxes, fontsize=12, color="gray")
        ax.set_axis_off()

    for row in axes:
        for a in row:
            a.grid(True, alpha=0.4)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    try:
        # Always PNG (whatever FILE's extension), never bbox_inches="tight": 1600x1000 exactly.
        fig.savefig(out, dpi=DPI, format="png")
    except OSError as e:
        raise PlotError(f"{out}: cannot write: {e.strerror or e}")
    finally:
        plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Plot RUN_DIR/metrics.jsonl of a wantrain run into one 1600x1000 PNG.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a wantrain --output-dir")
    parser.add_argument("--out", metavar="FILE", help="PNG to write (default RUN_DIR/plot.png)")
    parser.add_argument("--log-scale", action="store_true",
                        help="logarithmic y axis for the loss panel")
    args = parser.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        msg = " ".join(str(e).split())
        print(f"{PROG}: needs python3 with matplotlib (Debian: apt-get install python3-matplotlib): {msg}",
              file=sys.stderr)
        return 1

    run_dir = args.run_dir
    out = args.out if args.out else os.path.join(run_dir, "plot.png")
    try:
        if not os.path.exists(run_dir):
            raise PlotError(f"{run_dir}: no such directory")
        if not os.path.isdir(run_dir):
            raise PlotError(f"{run_dir}: not a directory")
        path = os.path.join(run_dir, "metrics.jsonl")
        if not os.path.exists(path):
            raise PlotError(f"{run_dir}: no metrics.jsonl (is RUN_DIR a wantrain --output-dir?)")
        if os.path.isdir(path):
            raise PlotError(f"{path}: is a directory")
        steps, vals, samples = read_metrics(path)
        # Samples drawn on sample ranks of their own (--sample-ranks) are in their log.
        sample_log = os.path.join(run_dir, "samples", "metrics.jsonl")
        if os.path.isfile(sample_log):
            samples = sorted(samples + read_metrics(sample_log, needs_steps=False)[2], key=lambda o: num(o["step"]))
        plot(run_dir, out, args.log_scale, steps, vals, samples, plt)
    except PlotError as e:
        print(f"{PROG}: {str(e).replace(chr(10), ' ')}", file=sys.stderr)
        return 2
    print(f"{PROG}: wrote {out} ({WIDTH * DPI}x{HEIGHT * DPI}; {len(steps)} logged steps, "
          f"{len(vals)} validations, {len(samples)} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
