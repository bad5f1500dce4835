#include "wantrain/train/train_log.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "wantrain/util/error.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/memory.hpp"

namespace wt::train {
namespace {

std::string duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

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
  // Replaced whole by rename: a crash here leaves the old file, not half of it.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kept;
    if (!out) throw Error(fmt::format("{}: cannot write", temporary));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) throw Error(fmt::format("{}: cannot replace", path));
}

}  // namespace

TrainLog::TrainLog(bool enabled, TrainLogOptions options) : enabled_(enabled), options_(std::move(options)) {
  if (!enabled_) return;
  if (options_.append) keep_lines_up_to(options_.metrics_path, options_.first_step);
  metrics_.open(options_.metrics_path, options_.append ? std::ios::app : std::ios::trunc);
  if (!metrics_) throw Error(fmt::format("{}: cannot open for writing", options_.metrics_path));
  progress_ = std::make_unique<Progress>("train", options_.total_steps, options_.stream);
  if (progress_->enabled()) progress_->advance(options_.first_step);
}

TrainLog::~TrainLog() = default;

bool TrainLog::is_logged_step(int64_t step) const {
  return step % options_.log_every == 0 || step == options_.total_steps;
}

void TrainLog::record(const StepResult& r, int64_t skipped_total) {
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

  const double step_time = wall_ / steps_;
  const double samples_per_s = double(options_.samples_per_step) / step_time;
  const double eta = step_time * double(options_.total_steps - r.step);
  if (progress_->enabled()) {
    progress_->set_status(
        fmt::format("loss {:.4f}  lr {:.2e}  {:.1f} samples/s  ETA {}", r.loss, r.lr, samples_per_s, duration(eta)));
    progress_->advance();
  }
  if (!is_logged_step(r.step)) return;

  const double n = steps_;
  const double loss = loss_sum_ / n;
  // Distillation adds the teacher's forward to the split.
  const std::string teacher = times_.teacher > 0 ? fmt::format("teacher {:.3f} + ", times_.teacher / n) : "";
  if (!progress_->enabled())
    std::fprintf(options_.stream,
                 "step %lld/%lld  epoch %lld  loss %.5f  lr %.3e  grad %.3f  %.1f samples/s  "
                 "step %.3f s = data %.3f + %sfwd %.3f + bwd %.3f + comm %.3f + optim %.3f  ETA %s\n",
                 static_cast<long long>(r.step), static_cast<long long>(options_.total_steps),
                 static_cast<long long>(r.epoch), loss, r.lr, r.grad_norm, samples_per_s, step_time, times_.data / n,
                 teacher.c_str(), times_.forward / n, times_.backward / n, times_.comm / n, times_.optimizer / n,
                 duration(eta).c_str());
  std::fflush(options_.stream);

  nlohmann::json line = {{"step", r.step},
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
                         {"peak_rss_mib", peak_rss_mib()},  // rank 0's so far; every rank's at the end
                         {"eta_s", eta}};
  write_line(line.dump());
  steps_ = 0;
  loss_sum_ = wall_ = 0;
  times_ = {};
}

void TrainLog::validation(int64_t step, double loss) {
  if (!enabled_) return;
  if (progress_->enabled()) std::fputc('\n', options_.stream);  // keep the bar's line
  std::fprintf(options_.stream, "step %lld  validation loss %.5f\n", static_cast<long long>(step), loss);
  std::fflush(options_.stream);
  write_line(nlohmann::json{{"step", step}, {"val_loss", loss}}.dump());
}

void TrainLog::finish(int64_t skipped_total, const std::vector<double>& peak_rss_mib) {
  if (!enabled_) return;
  progress_.reset();  // ends the bar's line
  std::vector<std::string> rss;
  for (const double mib : peak_rss_mib) rss.push_back(fmt::format("{:.0f}", mib));
  const double samples_per_s = run_wall_ > 0 ? double(run_steps_ * options_.samples_per_step) / run_wall_ : 0.0;
  std::fprintf(options_.stream, "trained %lld steps in %s (%.1f samples/s), %lld skipped; peak RSS per rank %s MiB\n",
               static_cast<long long>(run_steps_), duration(run_wall_).c_str(), samples_per_s,
               static_cast<long long>(skipped_total), fmt::format("{}", fmt::join(rss, ", ")).c_str());
  std::fflush(options_.stream);
  // With the last step's number, so that a resume's truncation treats it
  // as that step's.
  write_line(nlohmann::json{{"step", options_.total_steps},
                            {"run_steps", run_steps_},
                            {"run_s", run_wall_},
                            {"run_samples_per_s", samples_per_s},
                            {"skipped_steps", skipped_total},
                            {"peak_rss_mib_per_rank", peak_rss_mib}}
                 .dump());
}

void TrainLog::write_line(const std::string& json) {
  metrics_ << json << '\n';
  metrics_.flush();
  if (!metrics_) throw Error(fmt::format("{}: write failed", options_.metrics_path));
}

}  // namespace wt::train
