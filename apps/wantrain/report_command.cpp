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

// A field as text whatever its type: "-" when absent or null (a start that
// ended without a record has a null exit status).
std::string text(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
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
  const std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto r = parse_json_or_discarded(contents);
  if (!r.is_object() || !r.contains("exit_status") || !(r["exit_status"].is_null() || r["exit_status"].is_number()))
    throw UsageError(fmt::format("{}: not a wantrain run record (JSON with exit_status)", path));

  // Every field read as text or a number, never assumed: a record may come
  // from another version, and a start under way has nulls.
  const auto world = r.value("world", nlohmann::json::object());
  std::set<std::string> hosts;
  if (world.is_object() && world.contains("hosts") && world["hosts"].is_array())
    for (const auto& h : world["hosts"])
      if (h.is_string()) hosts.insert(h.get<std::string>());
  const std::string ranks = world.is_object() ? text(world, "ranks") : "-";
  std::string out =
      fmt::format("run {}: {} (exit status {})\n", run_dirs.front(), text(r, "exit_reason"), text(r, "exit_status"));
  auto row = [&out](const char* name, const std::string& value) { out += fmt::format("  {:<14} {}\n", name, value); };
  row("program", fmt::format("{} {} (git {})", text(r, "program"), text(r, "version"), text(r, "git_commit")));
  row("command", text(r, "command_line"));
  row("world",
      fmt::format("{} rank{} on {} host{} ({}), backend {}, {}", ranks, ranks == "1" ? "" : "s", hosts.size(),
                  hosts.size() == 1 ? "" : "s", fmt::join(hosts, ", "),
                  world.is_object() ? text(world, "backend") : "-", world.is_object() ? text(world, "device") : "-"));
  row("steps", fmt::format("{} -> {} of {} ({} this run)", text(r, "first_step"), text(r, "last_step"),
                           text(r, "total_steps"), text(r, "steps")));
  auto seconds = [&r](const char* key) {
    const auto it = r.find(key);
    return it != r.end() && it->is_number() ? format_duration(it->get<double>()) : std::string("-");
  };
  row("time", fmt::format("{} wall, {} training, {} samples/s", seconds("wall_s"), seconds("train_s"),
                          figure(r, "samples_per_s", "{:.1f}")));
  row("loss", fmt::format("{} (the last logged interval's mean)", figure(r, "final_loss")));
  const std::string best_step = text(r, "best_val_step");
  row("val loss", fmt::format("final {}, best {}{}", figure(r, "final_val_loss"), figure(r, "best_val_loss"),
                              best_step != "-" && best_step != "-1" ? " at step " + best_step : std::string()));
  const auto sample = r.value("last_sample", nlohmann::json());
  if (sample.is_object())
    row("sample", fmt::format("correlation {} at step {} ({})", figure(sample, "correlation", "{:.3f}"),
                              text(sample, "step"), text(sample, "png")));
  row("peak RSS", per_rank(r.value("peak_rss_mib_per_rank", nlohmann::json())));
  if (r.contains("peak_device_mib_per_rank"))
    row("peak device", per_rank(r.value("peak_device_mib_per_rank", nlohmann::json())));
  row("checkpoint", text(r, "latest_checkpoint") == "-" ? std::string("none") : text(r, "latest_checkpoint"));
  row("started", fmt::format("{}, finished {}", text(r, "started"), text(r, "finished")));
  const auto earlier_runs = r.value("earlier_runs", nlohmann::json::array());
  if (earlier_runs.is_array())
    for (const auto& earlier : earlier_runs)
      if (earlier.is_object())
        row("earlier run", fmt::format("steps {} -> {}: {} (exit status {}), started {}", text(earlier, "first_step"),
                                       text(earlier, "last_step"), text(earlier, "exit_reason"),
                                       text(earlier, "exit_status"), text(earlier, "started")));
  std::cout << out;
  return kExitOk;
}

}  // namespace wt
