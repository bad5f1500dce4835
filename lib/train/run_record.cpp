#include "wantrain/train/run_record.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "wantrain/ckpt/directory.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"

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
  if (!enabled_ || first_step_ == 0) return;
  // The starts this one continues: those that began before its first step
  // (a start the resume point precedes is superseded by this one).
  std::ifstream in(output_dir_ + "/run.json");
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto previous = parse_json_or_discarded(text);
  if (!previous.is_object()) return;
  auto starts = previous.value("earlier_runs", nlohmann::json::array());
  nlohmann::json last = {{"started", previous.value("started", "")},
                         {"finished", previous.value("finished", "")},
                         {"first_step", previous.value("first_step", int64_t(0))},
                         {"last_step", previous.value("last_step", int64_t(0))},
                         {"exit_status", previous.value("exit_status", -1)},
                         {"exit_reason", previous.value("exit_reason", "")}};
  starts.push_back(last);
  for (const auto& start : starts)
    if (start.is_object() && start.value("first_step", int64_t(0)) < first_step_) earlier_runs_.push_back(start);
  const auto best = previous.find("best_val_loss");
  if (best != previous.end() && best->is_number() && previous.value("best_val_step", int64_t(-1)) <= first_step_) {
    best_val_loss_ = best->get<double>();
    best_val_step_ = previous.value("best_val_step", int64_t(-1));
  }
}

void RunRecord::validation(int64_t step, double loss) {
  if (!enabled_) return;
  final_val_loss_ = loss;
  if (!(loss >= best_val_loss_)) {  // also when there is no best yet (NaN)
    best_val_loss_ = loss;
    best_val_step_ = step;
  }
}

void RunRecord::sample(int64_t step, const SampleReport& s) {
  if (!enabled_) return;
  last_sample_ = {
      {"step", step}, {"index", s.index}, {"correlation", s.correlation}, {"mse", s.mse}, {"png", s.png_path}};
}

void RunRecord::write(int status, const std::string& reason, const RunProgress& p, const MemoryPeaks& peaks) const {
  if (!enabled_) return;
  const auto now = std::chrono::system_clock::now();
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
                           {"finished", utc(now)},
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
  write_file_durably(output_dir_ + "/run.json", record.dump(2) + "\n");
}

}  // namespace wt::train
