// csvfit: an MLP regressor on the numeric columns of a CSV file, trained
// data-parallel by the same Engine, sampler, checkpoints and loop (train::fit)
// as wantrain — the seed-004 job in C++, and the proof that a second model
// family needs no change to the library.
//
//   mpirun -np 2 csvfit --data train.csv --target-cols y1,y2 --val-data val.csv --output-dir runs/c
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "wantrain/app/app.hpp"
#include "wantrain/app/run_identity.hpp"
#include "wantrain/app/training_options.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/data/csv_table.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/nn/mlp.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/train/regression_objective.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/tensor_samples.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/log.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/stop_signals.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/util/threads.hpp"

namespace wt::csvfit {
namespace {

// csvfit's own options beside the shared ones, with csvfit's defaults.
struct Config : app::TrainingOptions {
  Config() {
    output_dir = "runs/csvfit";
    batch_size = 32;
    lr = 1e-3;
    weight_decay = 0.0;
  }
  std::string config_file, data, val_data, target_cols, hidden = "64,64";
};

void declare(OptionSet& o, Config& c) {
  using T = app::TrainingOption;
  o.group("general").standard_options(&c.config_file);
  declare_training_options(o, c, {T::OutputDir, T::Seed, T::DryRun, T::LogEvery, T::Threads});
  o.group("data")
      .add("data", &c.data, "training CSV: a header row, then numeric rows")
      .add("target-cols", &c.target_cols, "comma-separated columns to predict; every other column is an input")
      .add("val-data", &c.val_data, "validation CSV with the same columns");
  declare_training_options(o, c, {T::ValEvery, T::BatchSize, T::NoDropLast});
  o.group("model").add("hidden", &c.hidden, "hidden layer widths, comma-separated (GELU between layers)");
  o.group("optimisation");
  declare_training_options(
      o, c,
      {T::Steps, T::Epochs, T::Lr, T::WeightDecay, T::Schedule, T::WarmupSteps, T::Clip, T::EmaDecay, T::GradAccum});
  o.group("checkpoints");
  declare_training_options(o, c, {T::SaveEvery, T::Keep, T::Resume, T::OnCkptError, T::CommTimeout});
}

void check(bool ok, const char* option, const std::string& expected) {
  if (!ok) throw UsageError(fmt::format("option --{}: {}", option, expected));
}

std::vector<int64_t> hidden_widths(const std::string& text) {
  std::vector<int64_t> widths;
  for (const auto& item : split_list(text)) {
    char* end = nullptr;
    widths.push_back(std::strtoll(item.c_str(), &end, 10));
    check(!item.empty() && *end == 0 && widths.back() > 0, "hidden", fmt::format("'{}' is not a list of widths", text));
  }
  return widths;
}

// The CSVs, read on every rank (a shared file system, as for wantrain's
// shards), and their columns: the targets and every other as an input.
struct CsvData {
  data::CsvTable train, val;
  std::vector<std::string> inputs, targets;
};
CsvData read_data(const distributed::World& world, const Config& c) {
  CsvData d;
  d.targets = split_list(c.target_cols);
  world.agree([&] {
    d.train = data::read_csv_table(c.data);
    for (const auto& name : d.targets) d.train.column(name);  // names the file and lists its columns
    for (const auto& name : d.train.columns)
      if (std::find(d.targets.begin(), d.targets.end(), name) == d.targets.end()) d.inputs.push_back(name);
    if (d.inputs.empty()) throw UsageError(fmt::format("{}: no input columns left besides --target-cols", c.data));
    if (d.train.rows < 2)
      throw UsageError(fmt::format("{}: one data row; the standardisation needs at least 2", c.data));
    if (!c.val_data.empty()) {
      d.val = data::read_csv_table(c.val_data);
      for (const auto& name : d.train.columns) d.val.column(name);
    }
  });
  return d;
}

int run(distributed::World& world, int argc, char** argv) {
  Config c;
  OptionSet options("csvfit", "--data train.csv --target-cols y1,y2 [--val-data val.csv] [options]");
  declare(options, c);
  set_option_names(options.setting_names());  // the library's settings that errors name, as these options
  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    if (outcome != OptionSet::Outcome::Run) return;
    check(!c.data.empty(), "data", "a training CSV is needed");
    check(!c.target_cols.empty(), "target-cols", "name the columns to predict");
    app::check_training_options(c);
    check(c.steps > 0 || c.epochs > 0, "steps", "give --steps N or --epochs N (one of them)");
    hidden_widths(c.hidden);
  });
  if (outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  torch::set_num_threads(threads_per_rank(c.threads, world.local_size()));
  distributed::CommOptions comm_options;
  comm_options.timeout = app::comm_timeout(c);
  world.set_timeout(comm_options.timeout);
  const auto comm = distributed::make_comm(world, distributed::Backend::Mpi, comm_options);

  const CsvData csv = read_data(world, c);
  const auto &train_table = csv.train, &val_table = csv.val;
  const auto &inputs = csv.inputs, &targets = csv.targets;
  const auto x = train_table.columns_tensor(inputs), y = train_table.columns_tensor(targets);  // fp64

  // Standardisation from rank 0's statistics (broadcast: every rank must
  // scale alike), in fp64 on one thread (the same figures whatever the
  // thread count); they belong to the model, so they are in its config.
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  const auto all = torch::cat({x, y}, 1);
  auto stats = torch::cat({all.mean(0), all.std(0).clamp_min(1e-12)});
  torch::set_num_threads(threads);
  comm->broadcast(stats, {0});
  const int64_t F = x.size(1), T = y.size(1);
  const auto mean = stats.slice(0, 0, F + T), scale = stats.slice(0, F + T);
  auto standardise = [&](const at::Tensor& in, const at::Tensor& out) {
    return std::map<std::string, at::Tensor>{
        {"x", ((in - mean.slice(0, 0, F)) / scale.slice(0, 0, F)).to(torch::kFloat32)},
        {"y", ((out - mean.slice(0, F)) / scale.slice(0, F)).to(torch::kFloat32)}};
  };
  train::TensorSamples samples(standardise(x, y));
  const auto hidden = hidden_widths(c.hidden);
  const nlohmann::json model_json = {
      {"kind", "csvfit-mlp"},
      {"inputs", inputs},
      {"targets", targets},
      {"hidden", hidden},
      {"mean", std::vector<double>(mean.data_ptr<double>(), mean.data_ptr<double>() + F + T)},
      {"scale", std::vector<double>(scale.data_ptr<double>(), scale.data_ptr<double>() + F + T)}};

  const train::RunSettings settings = app::run_settings(c);
  train::RunPlan plan;
  world.agree([&] {
    plan = train::plan_run(settings, world.size(), world.rank(), data::DataLayout({int64_t(samples.size())}));
  });
  if (world.is_root())
    log::info_lines("csvfit: resolved configuration\n" + options.resolved_table() +
                    fmt::format("data: {} ({} rows), inputs {}, targets {}\n{}", c.data, samples.size(),
                                fmt::join(inputs, ","), fmt::join(targets, ","), plan.describe_epoch()) +
                    fmt::format("model: MLP {} -> {} -> {}\n", F, fmt::join(hidden, " -> "), T) + plan.describe());
  if (c.dry_run) return kExitOk;

  nlohmann::json run_options = nlohmann::json::object();
  for (const auto& option : options.resolved()) run_options[option.name] = option.value;
  train::FitOptions fit_options = app::fit_options(c);
  fit_options.run_options = run_options.dump();
  fit_options.model_config = model_json.dump();
  fit_options.identity = app::run_identity("csvfit", world, *comm, argc, argv);
  train::StartPoint start = train::start_run(world, fit_options, c.resume, "the data and options of this run");

  // The model, objective and Engine, with a resumed checkpoint's state:
  // every rank checks it alike, so a misfit is one line and status 2.
  torch::manual_seed(c.seed);
  auto mlp = nn::make_mlp(F, hidden, T);
  train::RegressionObjective objective(mlp);
  data::DistributedSampler sampler(data::DataLayout({int64_t(samples.size())}), plan.sampler);
  std::unique_ptr<train::Engine> engine;
  train::FitRun fit_run;
  world.agree([&] {
    if (start.checkpoint) {
      objective.check_resume(start.checkpoint->objective_kind, start.checkpoint->objective, start.path);
      ckpt::check_fits(*start.checkpoint, start.path, objective.trainable(),
                       c.ema_decay > 0 ? objective.trainable() : train::NamedTensors{});
      ckpt::copy_named(start.checkpoint->model, objective.trainable());
      train::restore_sampler(*start.checkpoint, start.path, sampler);
    }
  });
  engine = std::make_unique<train::Engine>(*comm, objective, plan.engine);
  if (start.checkpoint) {
    engine->load_state(*start.checkpoint, start.path);
    fit_run.resumed = true;
    fit_run.first_epoch = start.checkpoint->state.epoch;
    start.checkpoint.reset();
  }
  train::SampledBatches batches(samples, std::move(sampler));
  std::unique_ptr<train::Validator> validator;
  if (!c.val_data.empty()) {
    const auto held_out = standardise(val_table.columns_tensor(inputs), val_table.columns_tensor(targets));
    validator = std::make_unique<train::Validator>(std::make_unique<train::TensorSamples>(held_out), c.batch_size);
  }
  fit_run.engine = engine.get();
  fit_run.batches = &batches;
  fit_run.validator = validator.get();
  fit_run.save_weights = [&](const std::string& dir, bool write) -> std::string {
    if (!write) return {};
    io::write_safetensors(dir + "/model.safetensors", objective.trainable(), at::kFloat);
    if (const auto* ema = engine->ema()) io::write_safetensors(dir + "/ema.safetensors", ema->averages(), at::kFloat);
    write_file_durably(dir + "/model-config.json", model_json.dump(2) + "\n");
    return fmt::format("weights: {0}/model.safetensors{1}, config (with the standardisation) {0}/model-config.json",
                       dir, engine->ema() ? fmt::format(" (EMA: {}/ema.safetensors)", dir) : std::string());
  };
  return train::fit(world, *comm, plan, fit_run, fit_options, start.best_val_loss);
}

}  // namespace
}  // namespace wt::csvfit

int main(int argc, char** argv) {
  const wt::StopSignalHandlers stop_signals;  // for the process's whole life, as wantrain's (train/fit.hpp)
  return wt::app::run_app(argc, argv, wt::csvfit::run);
}
