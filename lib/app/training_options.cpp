#include "wantrain/app/training_options.hpp"

#include <fmt/format.h>

#include <cmath>

#include "wantrain/util/error.hpp"
#include "wantrain/util/options.hpp"

namespace wt::app {
namespace {

void require(bool ok, const char* option, const std::string& expected) {
  if (!ok) throw UsageError(fmt::format("option --{}: {}", option, expected));
}

void declare_one(OptionSet& o, TrainingOptions& v, TrainingOption option) {
  switch (option) {
    case TrainingOption::OutputDir:
      o.add("output-dir", &v.output_dir, "directory for checkpoints, metrics.jsonl and the final weights");
      return;
    case TrainingOption::Seed:
      o.add("seed", &v.seed, "seed of every random stream (data order, initial weights, noise)");
      return;
    case TrainingOption::DryRun:
      o.flag("dry-run", &v.dry_run, "print the resolved configuration and the plan, then exit");
      return;
    case TrainingOption::LogEvery:
      o.add("log-every", &v.log_every, "steps between log lines when not on a terminal");
      return;
    case TrainingOption::Threads:
      o.add("threads", &v.threads, "CPU threads per rank (0: the node's cores shared among its ranks)");
      return;
    case TrainingOption::BatchSize: o.add("batch-size", &v.batch_size, "samples per rank per micro-step"); return;
    case TrainingOption::NoDropLast:
      o.flag("no-drop-last", &v.no_drop_last,
             "pad the last batch of an epoch by wrapping around instead of dropping it");
      return;
    case TrainingOption::ValEvery:
      o.add("val-every", &v.val_every, "steps between validation passes (0: at the end only)");
      return;
    case TrainingOption::Steps: o.add("steps", &v.steps, "optimizer steps to run (or --epochs)"); return;
    case TrainingOption::Epochs: o.add("epochs", &v.epochs, "epochs to run (or --steps)"); return;
    case TrainingOption::Lr: o.add("lr", &v.lr, "AdamW learning rate"); return;
    case TrainingOption::WeightDecay: o.add("weight-decay", &v.weight_decay, "AdamW weight decay"); return;
    case TrainingOption::Schedule:
      o.choice("schedule", &v.schedule, {"constant", "cosine"}, "learning-rate schedule after warm-up");
      return;
    case TrainingOption::WarmupSteps: o.add("warmup-steps", &v.warmup_steps, "linear warm-up steps"); return;
    case TrainingOption::Clip: o.add("clip", &v.clip, "clip gradients to this global norm (0: off)"); return;
    case TrainingOption::EmaDecay: o.add("ema-decay", &v.ema_decay, "EMA decay of the weights (0: no EMA)"); return;
    case TrainingOption::GradAccum:
      o.add("grad-accum", &v.grad_accum, "micro-steps accumulated per optimizer step");
      return;
    case TrainingOption::SaveEvery:
      o.add("save-every", &v.save_every, "steps between checkpoints (0: only at the end)");
      return;
    case TrainingOption::Keep: o.add("keep", &v.keep, "checkpoints kept (older ones are pruned; 0: keep all)"); return;
    case TrainingOption::Resume:
      o.add("resume", &v.resume, "auto (the output directory's latest checkpoint) or a checkpoint path");
      return;
    case TrainingOption::OnCkptError:
      o.choice("on-ckpt-error", &v.on_ckpt_error, {"warn", "fail"}, "what a failed checkpoint write does");
      return;
    case TrainingOption::CommTimeout:
      o.add("comm-timeout", &v.comm_timeout, "seconds a collective may take before the job is ended");
      return;
  }
}

}  // namespace

void declare_training_options(OptionSet& options, TrainingOptions& values,
                              std::initializer_list<TrainingOption> which) {
  for (const auto option : which) declare_one(options, values, option);
}

void check_training_options(const TrainingOptions& v) {
  require(v.log_every >= 1, "log-every", "must be at least 1");
  require(v.threads >= 0, "threads", "must be 0 (automatic) or more");
  require(v.batch_size >= 1, "batch-size", "must be at least 1");
  require(v.val_every >= 0, "val-every", "must be 0 (at the end only) or more");
  require(v.steps >= 0, "steps", "must be 0 or more");
  require(v.epochs >= 0, "epochs", "must be 0 or more");
  require(!(v.steps > 0 && v.epochs > 0), "steps", "give --steps or --epochs, not both");
  require(v.lr > 0, "lr", "must be positive");
  require(v.weight_decay >= 0, "weight-decay", "must be 0 or more");
  require(v.warmup_steps >= 0, "warmup-steps", "must be 0 or more");
  require(v.clip >= 0, "clip", "must be 0 (off) or more");
  require(v.ema_decay >= 0 && v.ema_decay < 1, "ema-decay", "must be in [0, 1)");
  require(v.grad_accum >= 1, "grad-accum", "must be at least 1");
  require(v.save_every >= 0, "save-every", "must be 0 or more");
  require(v.keep >= 0, "keep", "must be 0 (keep all) or more");
  require(std::isfinite(v.comm_timeout) && v.comm_timeout >= 0.001 && v.comm_timeout <= 1e7, "comm-timeout",
          "must be a positive number of seconds");
}

train::RunSettings run_settings(const TrainingOptions& v) {
  train::RunSettings s;
  s.micro_batch = v.batch_size;
  s.accumulation = v.grad_accum;
  s.steps = v.steps;
  s.epochs = v.epochs;
  s.seed = v.seed;
  s.drop_last = !v.no_drop_last;
  s.lr = v.lr;
  s.schedule = v.schedule == "cosine" ? train::Schedule::Cosine : train::Schedule::Constant;
  s.warmup_steps = v.warmup_steps;
  s.adamw.weight_decay = v.weight_decay;
  s.clip = v.clip;
  s.ema_decay = v.ema_decay;
  return s;
}

train::FitOptions fit_options(const TrainingOptions& v) {
  train::FitOptions o;
  o.output_dir = v.output_dir;
  o.save_every = v.save_every;
  o.keep = v.keep;
  o.val_every = v.val_every;
  o.log_every = v.log_every;
  o.stop_on_checkpoint_error = v.on_ckpt_error == "fail";
  return o;
}

std::chrono::milliseconds comm_timeout(const TrainingOptions& v) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(v.comm_timeout * 1000));
}

}  // namespace wt::app
