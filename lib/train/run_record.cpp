#include "wantrain/train/run_record.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "wantrain/ckpt/directory.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::train {
namespace {

std::string utc(std::chrono::system_clock::time_point t) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::chrono::system_clock::to_time_t(t)));
}

// NaN has no JSON: absent figures are null.
nlohmann::json number(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(); }

}  // namespace

RunRecord::RunRecord(bool enabled, std::string output_dir, RunIdentity identity, std::string config_json,
                     std::string model_config_json, int64_t first_step, int64_t total_steps)
    : enabled_(enabled),
      output_dir_(std::move(output_dir)),
      identity_(std::move(identity)),
      config_json_(std::move(config_json)),
      model_config_json_(std::move(model_config_json)),
      first_step_(first_step),
      total_steps_(total_steps),
      started_(std::chrono::system_clock::now()) {
  progress_.last_step = first_step_;
  if (!enabled_ || first_step_ == 0) return;
  // The starts this one continues: those that began before its first step
  // (a start the resume point precedes is superseded by this one).
  std::ifstream in(output_dir_ + "/run.json");
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto previous = parse_json_or_discarded(text);
  if (!previous.is_object()) return;
  auto starts = previous.value("earlier_runs", nlohmann::json::array());
  if (!starts.is_array()) starts = nlohmann::json::array();
  nlohmann::json last = nlohmann::json::object();
  for (const char* key : {"started", "finished", "first_step", "last_step", "exit_status", "exit_reason"})
    last[key] = previous.contains(key) ? previous[key] : nlohmann::json();  // null: it ended without a record
  starts.push_back(last);
  for (const auto& start : starts) {
    const auto first = start.is_object() ? start.find("first_step") : start.end();
    if (start.is_object() && first != start.end() && first->is_number_integer() && first->get<int64_t>() < first_step_)
      earlier_runs_.push_back(start);
  }
  const auto best = previous.find("best_val_loss");
  const auto best_step = previous.find("best_val_step");
  if (best != previous.end() && best->is_number() && best_step != previous.end() && best_step->is_number_integer() &&
      best_step->get<int64_t>() <= first_step_) {
    best_val_loss_ = best->get<double>();
    best_val_step_ = best_step->get<int64_t>();
  }
}

void RunRecord::write_started() const {
  if (!enabled_) return;
  write_json(nlohmann::json(), "running, or ended without a record (killed, or an error on another rank)", {});
}

void RunRecord::progress(const RunProgress& progress) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  progress_ = progress;
}

void RunRecord::validation(int64_t step, double loss) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  final_val_loss_ = loss;
  if (std::isfinite(loss) && !(loss >= best_val_loss_)) {  // also when there is no best yet (NaN)
    best_val_loss_ = loss;
    best_val_step_ = step;
  }
}

void RunRecord::sample(int64_t step, const SampleReport& s) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  last_sample_ = {
      {"step", step}, {"index", s.index}, {"correlation", s.correlation}, {"mse", s.mse}, {"png", s.png_path}};
}

void RunRecord::write(int status, const std::string& reason, const MemoryPeaks& peaks) const {
  if (!enabled_) return;
  write_json(status, reason, peaks);
}

void RunRecord::write_json(const nlohmann::json& status, const std::string& reason, const MemoryPeaks& peaks) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const RunProgress& p = progress_;
  const auto now = std::chrono::system_clock::now();
  const bool ended = !status.is_null();
  nlohmann::json record = {{"program", identity_.program},
                           {"version", identity_.version},
                           {"git_commit", identity_.git_commit},
                           {"command_line", identity_.command_line},
                           {"world",
                            {{"ranks", identity_.hosts.size()},
                             {"hosts", identity_.hosts},
                             {"backend", identity_.backend},
                             {"device", identity_.device}}},
                           {"config", parse_json_or_discarded(config_json_)},
                           {"model_config", parse_json_or_discarded(model_config_json_)},
                           {"started", utc(started_)},
                           {"finished", ended ? nlohmann::json(utc(now)) : nlohmann::json()},
                           {"wall_s", std::chrono::duration<double>(now - started_).count()},
                           {"first_step", first_step_},
                           {"last_step", p.last_step},
                           {"total_steps", total_steps_},
                           {"steps", p.steps},
                           {"train_s", p.train_seconds},
                           {"samples_per_s", p.samples_per_s},
                           {"final_loss", number(p.last_loss)},
                           {"final_val_loss", number(final_val_loss_)},
                           {"best_val_loss", number(best_val_loss_)},
                           {"best_val_step", best_val_step_},
                           {"last_sample", last_sample_},
                           {"peak_rss_mib_per_rank", peaks.rss_mib},
                           {"exit_status", status},
                           {"exit_reason", reason},
                           {"earlier_runs", earlier_runs_}};
  if (!peaks.device_mib.empty()) record["peak_device_mib_per_rank"] = peaks.device_mib;
  const auto latest = ckpt::linked_checkpoint(output_dir_, "latest");
  record["latest_checkpoint"] = latest ? nlohmann::json(*latest) : nlohmann::json();
  // A record is for reading: a full or read-only disk costs it, never the run.
  try {
    write_file_durably(output_dir_ + "/run.json", record.dump(2) + "\n");
  } catch (const Error& e) {
    if (!write_failed_) report_warning("{} (run.json is not updated; training goes on)", e.what());
    write_failed_ = true;
  }
}

}  // namespace wt::train
