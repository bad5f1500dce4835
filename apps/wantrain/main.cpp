// wantrain: train or distill a Wan diffusion transformer, data-parallel over MPI ranks.
// Options -> TrainConfig -> wan::TrainSettings -> wan::run_training_job (checks, RunPlan,
// memory plan, WanRun from its ModelRecipe, train::fit; expert groups, sample ranks).
#include <iostream>
#include <nlohmann/json.hpp>

#include "export_command.hpp"
#include "plot_command.hpp"
#include "report_command.hpp"
#include "train_config.hpp"
#include "wantrain/app/app.hpp"
#include "wantrain/app/run_identity.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/config.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/log.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/stop_signals.hpp"
#include "wantrain/util/test_hooks.hpp"
#include "wantrain/wan/run/train_job.hpp"

namespace wt::wantrain {
namespace {

int run(distributed::World& world, int argc, char** argv) {
  TrainConfig cfg;
  OptionSet options(
      "wantrain",
      "[--config run.ini] [options]\n       wantrain plot RUN_DIR [--out FILE]   wantrain report RUN_DIR\n"
      "       wantrain export --checkpoint PATH --out FILE [--ema] "
      "(see wantrain export --help)\n       wantrain export --model-config C.json --seed S --out FILE "
      "[--random-head] [--dtype bf16]");
  declare_options(options, cfg);
  set_option_names(options.setting_names());  // the library's settings that errors name, as these options

  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    for (const auto& option : options.resolved())
      if (option.source != "default") cfg.given.insert(option.name);
    if (outcome == OptionSet::Outcome::Run) validate(cfg);
  });
  if (outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  wan::TrainSettings settings = train_settings(cfg);
  nlohmann::json record = nlohmann::json::object();  // what checkpoints store of the run's options
  for (const auto& option : options.resolved()) record[option.name] = option.value;
  settings.fit.run_options = record.dump();

  wan::TrainJobTool tool;
  tool.resolved_options = "wantrain " WANTRAIN_VERSION ": resolved configuration\n" + options.resolved_table();
  tool.identity = [argc, argv](const distributed::World& w, const distributed::Comm& comm) {
    return app::run_identity("wantrain", w, comm, argc, argv);
  };
  tool.enter_group = log::set_group;
  return wan::run_training_job(world, settings, tool);
}

}  // namespace
}  // namespace wt::wantrain

int main(int argc, char** argv) {
  // `wantrain export ...`, `plot ...` and `report ...` are subcommands; everything else is a training run.
  if (argc > 1 && std::string(argv[1]) == "export") return wt::app::run_app(argc - 1, argv + 1, wt::run_export);
  if (argc > 1 && std::string(argv[1]) == "plot") return wt::app::run_local(argc - 1, argv + 1, wt::run_plot);
  if (argc > 1 && std::string(argv[1]) == "report") return wt::app::run_local(argc - 1, argv + 1, wt::run_report);
  // For the whole life of a training process, a stop signal is recorded and
  // answered (train/fit.hpp): before the first step, exit 75 with nothing to
  // save; at a step boundary, checkpoint and 75; during the final
  // checkpoint, finish it and 75; after the run, ignored (status 0), also
  // while the process exits.
  int status = 0;
  {
    const wt::StopSignalHandlers stop_signals;
    status = wt::app::run_app(argc, argv, wt::wantrain::run);
  }
  wt::test_delay("after_run");  // a test's window for a signal while the process exits
  return status;
}
