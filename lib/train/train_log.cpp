#include "wantrain/train/train_log.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/text.hpp"

namespace wt::train {
namespace {

// A resumed run continues the file from its checkpoint's step: lines the
// interrupted run logged after it are dropped (they are logged again).
void keep_lines_up_to(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const auto json = parse_json_or_discarded(line);
    if (json.is_object() && json.contains("step") && json["step"].is_number_integer() &&
        json["step"].get<int64_t>() <= step)
      kept += line + '\n';
  }
  in.close();
  write_file_durably(path, kept);  // a crash here leaves the old file, not half of it
}

std::string per_rank(const std::vector<double>& mib) {
  std::vector<std::string> text;
  for (const double value : mib) text.push_back(fmt::format("{:.0f}", value));
  return fmt::format("{}", fmt::join(text, ", "));
}

// Memory as TensorBoard scalars, one tag per rank.
void add_memory(std::vector<report::Scalar>& scalars, const MemoryPeaks& peaks) {
  for (size_t r = 0; r < peaks.rss_mib.size(); ++r)
    scalars.push_back({fmt::format("memory/peak_rss_mib/rank_{}", r), peaks.rss_mib[r]});
  for (size_t r = 0; r < peaks.device_mib.size(); ++r)
    scalars.push_back({fmt::format("memory/peak_device_mib/rank_{}", r), peaks.device_mib[r]});
}

void add_memory(nlohmann::json& line, const MemoryPeaks& peaks) {
  if (!peaks.rss_mib.empty()) line["peak_rss_mib_per_rank"] = peaks.rss_mib;
  if (!peaks.device_mib.empty()) line["peak_device_mib_per_rank"] = peaks.device_mib;
}

}  // namespace

TrainLog::TrainLog(bool enabled, TrainLogOptions options) : enabled_(enabled), options_(std::move(options)) {
  if (!enabled_) return;
  if (options_.append) keep_lines_up_to(options_.metrics_path, options_.first_step);
  metrics_.open(options_.metrics_path, options_.append ? std::ios::app : std::ios::trunc);
  if (!metrics_) throw Error(fmt::format("{}: cannot open for writing", options_.metrics_path));
  if (!options_.tensorboard_dir.empty()) {
    to_tensorboard([&] {
      tensorboard_ = std::make_unique<report::TensorBoardWriter>(options_.tensorboard_dir,
                                                                 options_.append ? options_.first_step : 0);
      for (const auto& note : tensorboard_->notes()) report_warning("{}", note);
    });
  }
  progress_ = std::make_unique<Progress>("train", options_.total_steps, options_.stream);
  if (progress_->enabled()) progress_->advance(options_.first_step);
}

TrainLog::~TrainLog() = default;

bool TrainLog::is_logged_step(int64_t step) const {
  return step % options_.log_every == 0 || step == options_.total_steps;
}

void TrainLog::line(const std::string& text) {
  if (progress_->enabled()) progress_->interrupt();  // the bar's line stays; the message goes under it
  report_info("{}", text);
}

void TrainLog::record(const StepResult& r, int64_t skipped_total, const MemoryPeaks& peaks) {
  if (!enabled_) return;
  ++steps_;
  ++run_steps_;
  loss_sum_ += r.loss;
  wall_ += r.times.total;
  run_wall_ += r.times.total;
  times_.data += r.times.data;
  times_.teacher += r.times.teacher;
  times_.forward += r.times.forward;
  times_.backward += r.times.backward;
  times_.comm += r.times.comm;
  times_.optimizer += r.times.optimizer;
  times_.gather += r.times.gather;

  const double step_time = wall_ / steps_;
  const double samples_per_s = double(options_.samples_per_step) / step_time;
  const double eta = step_time * double(options_.total_steps - r.step);
  if (progress_->enabled()) {
    progress_->set_status(fmt::format("loss {:.4f}  lr {:.2e}  {:.1f} samples/s  ETA {}", r.loss, r.lr, samples_per_s,
                                      format_duration(eta)));
    progress_->advance();
  }
  if (!is_logged_step(r.step)) return;

  const double n = steps_;
  const double loss = loss_sum_ / n;
  last_loss_ = loss;
  const bool scaled = std::isfinite(r.loss_scale);
  // Distillation adds the teacher's forward to the split.
  const std::string teacher = times_.teacher > 0 ? fmt::format("teacher {:.3f} + ", times_.teacher / n) : "";
  // A second trained group (a fake score) has its own norm and clip.
  std::string other_norms;
  for (size_t g = 1; g < r.group_norms.size(); ++g)
    other_norms +=
        fmt::format("{}{} {:.3f}", other_norms.empty() ? " (" : ", ", r.group_norms[g].first, r.group_norms[g].second);
  if (!other_norms.empty()) other_norms += ")";
  if (!progress_->enabled())
    report_info(
        "step {}/{}  epoch {}  loss {:.5f}  lr {:.3e}  grad {:.3f}{}{}  {:.1f} samples/s  "
        "step {:.3f} s = data {:.3f} + {}fwd {:.3f} + bwd {:.3f} + comm {:.3f} + optim {:.3f}{}  ETA {}",
        r.step, options_.total_steps, r.epoch, loss, r.lr, r.grad_norm, other_norms,
        scaled ? fmt::format("  loss scale {:g}", r.loss_scale) : std::string(), samples_per_s, step_time,
        times_.data / n, teacher, times_.forward / n, times_.backward / n, times_.comm / n, times_.optimizer / n,
        // Inside fwd and bwd: the weights waited for (ZeRO-3's gathers, block swap's copies).
        times_.gather > 0 ? fmt::format(" (weights waited for {:.3f})", times_.gather / n) : std::string(),
        format_duration(eta));

  nlohmann::json json = {{"step", r.step},
                         {"epoch", r.epoch},
                         {"loss", loss},
                         {"lr", r.lr},
                         {"grad_norm", r.grad_norm},
                         {"samples_per_s", samples_per_s},
                         {"step_s", step_time},
                         {"data_s", times_.data / n},
                         {"teacher_s", times_.teacher / n},
                         {"forward_s", times_.forward / n},
                         {"backward_s", times_.backward / n},
                         {"comm_s", times_.comm / n},
                         {"optimizer_s", times_.optimizer / n},
                         {"skipped_steps", skipped_total},
                         {"eta_s", eta}};
  for (size_t g = 1; g < r.group_norms.size(); ++g)
    json["grad_norm_" + r.group_norms[g].first] = r.group_norms[g].second;
  if (scaled) json["loss_scale"] = r.loss_scale;
  if (times_.gather > 0) json["weights_wait_s"] = times_.gather / n;
  if (!peaks.rss_mib.empty()) json["peak_rss_mib"] = peaks.rss_mib[0];  // rank 0's, as before per-rank figures
  add_memory(json, peaks);
  write_line(json.dump());

  if (tensorboard_) {
    std::vector<report::Scalar> scalars = {{"train/loss", loss},
                                           {"train/lr", r.lr},
                                           {"train/grad_norm", r.grad_norm},
                                           {"train/samples_per_s", samples_per_s},
                                           {"train/skipped_steps", double(skipped_total)},
                                           {"time/step_s", step_time},
                                           {"time/data_s", times_.data / n},
                                           {"time/forward_s", times_.forward / n},
                                           {"time/backward_s", times_.backward / n},
                                           {"time/comm_s", times_.comm / n},
                                           {"time/optimizer_s", times_.optimizer / n}};
    if (times_.teacher > 0) scalars.push_back({"time/teacher_s", times_.teacher / n});
    for (size_t g = 1; g < r.group_norms.size(); ++g)
      scalars.push_back({"train/grad_norm_" + r.group_norms[g].first, r.group_norms[g].second});
    if (scaled) scalars.push_back({"train/loss_scale", r.loss_scale});
    add_memory(scalars, peaks);
    to_tensorboard([&] { tensorboard_->scalars(r.step, scalars); });
  }
  steps_ = 0;
  loss_sum_ = wall_ = 0;
  times_ = {};
}

void TrainLog::validation(int64_t step, const ValidationResult& result) {
  if (!enabled_) return;
  std::string buckets;
  nlohmann::json record{{"step", step}, {"val_loss", result.loss}};
  std::vector<report::Scalar> scalars{{"val/loss", result.loss}};
  for (const auto& g : result.groups) {
    buckets += fmt::format("{}{} {:.5f} ({})", buckets.empty() ? "; per bucket: " : ", ", g.name, g.loss, g.samples);
    record["val_loss_buckets"][g.name] = g.loss;
    scalars.push_back({"val/loss/" + g.name, g.loss});
  }
  line(fmt::format("step {}  validation loss {:.5f}{}", step, result.loss, buckets));
  write_line(record.dump());
  if (tensorboard_) to_tensorboard([&] { tensorboard_->scalars(step, scalars); });
}

void TrainLog::sample(int64_t step, const SampleReport& s) {
  if (!enabled_) return;
  line(
      fmt::format("step {}  sample of training sample {}: correlation {:.3f}, MSE {:.4f} against its latents; {} "
                  "({:.2f} s)",
                  step, s.index, s.correlation, s.mse, s.png_path, s.seconds));
  write_line(nlohmann::json{{"step", step},
                            {"sample_index", s.index},
                            {"sample_correlation", s.correlation},
                            {"sample_mse", s.mse},
                            {"sample_s", s.seconds},
                            {"sample_png", s.png_path}}
                 .dump());
  for (const auto& video : s.videos) {
    line(fmt::format("step {}  prompt {:02d} \"{}\": {} ({:.2f} s, rank {})", step, video.index, video.prompt,
                     video.path.empty() ? "not written" : video.path, video.seconds, video.rank));
    write_line(nlohmann::json{{"step", step},
                              {"prompt_index", video.index},
                              {"prompt", video.prompt},
                              {"prompt_video", video.path},
                              {"prompt_video_s", video.seconds}}
                   .dump());
  }
  if (tensorboard_)
    to_tensorboard([&] {
      tensorboard_->scalars(
          step, {{"sample/correlation", s.correlation}, {"sample/mse", s.mse}, {"sample/seconds", s.seconds}});
      tensorboard_->image(step, "sample/preview", s.image);
      for (const auto& video : s.videos)
        if (!video.strip.png.empty())
          tensorboard_->image(step, fmt::format("prompts/{:02d}", video.index), video.strip);
    });
}

void TrainLog::finish(int64_t skipped_total, const MemoryPeaks& peaks) {
  if (!enabled_) return;
  progress_.reset();  // ends the bar's line
  const double samples_per_s = run_wall_ > 0 ? double(run_steps_ * options_.samples_per_step) / run_wall_ : 0.0;
  report_info("trained {} steps in {} ({:.1f} samples/s), {} skipped; peak RSS per rank {} MiB{}", run_steps_,
              format_duration(run_wall_), samples_per_s, skipped_total, per_rank(peaks.rss_mib),
              peaks.device_mib.empty()
                  ? std::string()
                  : fmt::format("; peak device memory per rank {} MiB", per_rank(peaks.device_mib)));
  // With the last step's number, so that a resume's truncation treats it
  // as that step's.
  nlohmann::json json = {{"step", options_.total_steps},
                         {"run_steps", run_steps_},
                         {"run_s", run_wall_},
                         {"run_samples_per_s", samples_per_s},
                         {"skipped_steps", skipped_total}};
  add_memory(json, peaks);
  write_line(json.dump());
}

void TrainLog::to_tensorboard(const std::function<void()>& write) {
  // The event files are a view of metrics.jsonl: a full or read-only disk
  // ends them with one warning, never the run.
  try {
    write();
  } catch (const Error& e) {
    report_warning("{} (no more TensorBoard events in this run; metrics.jsonl goes on)", e.what());
    tensorboard_.reset();
  }
}

void TrainLog::write_line(const std::string& json) {
  metrics_ << json << '\n';
  metrics_.flush();
  if (!metrics_) throw Error(fmt::format("{}: write failed", options_.metrics_path));
}

}  // namespace wt::train
