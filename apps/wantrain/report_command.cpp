#include "report_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <set>
#include <vector>

#include "wantrain/app/version.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/util/options.hpp"

namespace wt {
namespace {

// A number of the record, or "-" when absent or null.
std::string figure(const nlohmann::json& record, const char* key, const char* format = "{:.5f}") {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return "-";
  return fmt::format(fmt::runtime(format), it->get<double>());
}

std::string per_rank(const nlohmann::json& values) {
  std::vector<std::string> text;
  if (values.is_array())
    for (const auto& v : values)
      if (v.is_number()) text.push_back(fmt::format("{:.0f}", v.get<double>()));
  return text.empty() ? "-" : fmt::format("{} MiB", fmt::join(text, ", "));
}

}  // namespace

int run_report(int argc, char** argv) {
  std::vector<std::string> run_dirs;
  std::string config_file;
  OptionSet options("wantrain report", "RUN_DIR");
  options.group("wantrain report")
      .standard_options(&config_file)
      .positional("run-dir", &run_dirs, "the run's --output-dir (its run.json is printed)", 1);
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (run_dirs.empty()) throw UsageError("wantrain report: give the run directory (its --output-dir)");
  const std::string path = run_dirs.front() + "/run.json";
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("{}: no such file (wantrain writes it when a run ends or stops)", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto r = parse_json_or_discarded(text);
  if (!r.is_object() || !r.contains("exit_status") || !r["exit_status"].is_number_integer())
    throw UsageError(fmt::format("{}: not a wantrain run record (JSON with exit_status)", path));

  const auto& world = r.value("world", nlohmann::json::object());
  std::set<std::string> hosts;
  for (const auto& h : world.value("hosts", nlohmann::json::array()))
    if (h.is_string()) hosts.insert(h.get<std::string>());
  const auto& sample = r.value("last_sample", nlohmann::json());
  std::string out = fmt::format("run {}: {} (exit status {})\n", run_dirs.front(), r.value("exit_reason", "?"),
                                r["exit_status"].get<int>());
  auto row = [&out](const char* name, const std::string& value) { out += fmt::format("  {:<14} {}\n", name, value); };
  row("wantrain", fmt::format("{} (git {})", r.value("version", "?"), r.value("git_commit", "?")));
  row("command", r.value("command_line", "?"));
  row("world", fmt::format("{} rank{} on {} host{} ({}), backend {}, {}", world.value("ranks", 0),
                           world.value("ranks", 0) == 1 ? "" : "s", hosts.size(), hosts.size() == 1 ? "" : "s",
                           fmt::join(hosts, ", "), world.value("backend", "?"), world.value("device", "?")));
  row("steps",
      fmt::format("{} -> {} of {} ({} this run)", r.value("first_step", int64_t(0)), r.value("last_step", int64_t(0)),
                  r.value("total_steps", int64_t(0)), r.value("steps", int64_t(0))));
  row("time", fmt::format("{} wall, {} training, {} samples/s", format_duration(r.value("wall_s", 0.0)),
                          format_duration(r.value("train_s", 0.0)), figure(r, "samples_per_s", "{:.1f}")));
  row("loss", fmt::format("{} (the last logged interval's mean)", figure(r, "final_loss")));
  const int64_t best_step = r.value("best_val_step", int64_t(-1));
  row("val loss", fmt::format("final {}, best {}{}", figure(r, "final_val_loss"), figure(r, "best_val_loss"),
                              best_step >= 0 ? fmt::format(" at step {}", best_step) : std::string()));
  if (sample.is_object())
    row("sample", fmt::format("correlation {} at step {} ({})", figure(sample, "correlation", "{:.3f}"),
                              sample.value("step", int64_t(0)), sample.value("png", "")));
  row("peak RSS", per_rank(r.value("peak_rss_mib_per_rank", nlohmann::json())));
  if (r.contains("peak_device_mib_per_rank"))
    row("peak device", per_rank(r.value("peak_device_mib_per_rank", nlohmann::json())));
  const auto& latest = r.value("latest_checkpoint", nlohmann::json());
  row("checkpoint", latest.is_string() ? latest.get<std::string>() : std::string("none"));
  row("started", fmt::format("{}, finished {}", r.value("started", "?"), r.value("finished", "?")));
  for (const auto& earlier : r.value("earlier_runs", nlohmann::json::array()))
    if (earlier.is_object())
      row("earlier run",
          fmt::format("steps {} -> {}: {} (exit status {}), started {}", earlier.value("first_step", int64_t(0)),
                      earlier.value("last_step", int64_t(0)), earlier.value("exit_reason", "?"),
                      earlier.value("exit_status", -1), earlier.value("started", "?")));
  std::cout << out;
  return kExitOk;
}

}  // namespace wt
