#include "plot_command.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

#include "wantrain/app/version.hpp"
#include "wantrain/config.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"

namespace wt {
namespace {
namespace fs = std::filesystem;

// Installed beside the binary's prefix (share/wantrain), else the source tree's.
std::string plot_script() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto installed = exe.parent_path().parent_path() / "share" / "wantrain" / "plot_metrics.py";
    if (fs::exists(installed)) return installed.string();
  }
  const std::string source = WANTRAIN_SOURCE_DIR "/scripts/plot_metrics.py";
  if (fs::exists(source)) return source;
  throw Error(fmt::format("wantrain plot: its script plot_metrics.py is neither in {} nor in {}",
                          (exe.parent_path().parent_path() / "share" / "wantrain").string(), source));
}

}  // namespace

int run_plot(int argc, char** argv) {
  std::vector<std::string> run_dirs;
  std::string out, config_file;
  bool log_scale = false;
  OptionSet options("wantrain plot", "RUN_DIR [--out FILE] [--log-scale]");
  options.group("wantrain plot")
      .standard_options(&config_file)
      .positional("run-dir", &run_dirs, "the run's --output-dir (its metrics.jsonl is plotted)", 1)
      .add("out", &out, "the PNG to write (default RUN_DIR/plot.png)")
      .flag("log-scale", &log_scale, "a logarithmic axis for the loss");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (run_dirs.empty()) throw UsageError("wantrain plot: give the run directory (its --output-dir) to plot");
  const std::string& run_dir = run_dirs.front();
  if (out.empty()) out = run_dir + "/plot.png";
  // WANTRAIN_PYTHON picks another interpreter with matplotlib.
  const char* from_environment = std::getenv("WANTRAIN_PYTHON");
  const std::string python = from_environment && *from_environment  ? from_environment
                             : std::string(WANTRAIN_PYTHON).empty() ? "python3"
                                                                    : WANTRAIN_PYTHON;
  const std::string script = plot_script();
  std::vector<std::string> args = {python, script, run_dir, "--out", out};
  if (log_scale) args.push_back("--log-scale");
  std::vector<char*> argv_out;
  for (auto& arg : args) argv_out.push_back(arg.data());
  argv_out.push_back(nullptr);
  std::cout.flush();
  // The script's status and its one error line are the command's.
  execvp(python.c_str(), argv_out.data());
  throw Error(
      fmt::format("wantrain plot: cannot run {}: {} (it needs python3 with matplotlib; Debian: apt-get "
                  "install python3-matplotlib, or set WANTRAIN_PYTHON)",
                  python, std::strerror(errno)));
}

}  // namespace wt
