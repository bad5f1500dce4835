// csvfit: an MLP regressor on the numeric columns of a CSV file, trained
// data-parallel by the same Engine, sampler, checkpoints and loop (train::fit)
// as wantrain — the seed-004 job in C++, and the proof that a second model
// family needs no change to the library.
//
//   mpirun -np 2 csvfit --data train.csv --target-cols y1,y2 --val-data val.csv --output-dir runs/c
#include <fmt/format.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "wantrain/app/app.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/data/csv_table.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/model/safetensors.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/train/regression_objective.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/tensor_samples.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/log.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/threads.hpp"

namespace wt::csvfit {
namespace {

struct Config {
  std::string config_file, data, val_data, target_cols, hidden = "64,64", output_dir = "runs/csvfit", resume;
  std::string schedule = "constant", on_ckpt_error = "fail";
  int batch_size = 32, grad_accum = 1, log_every = 10, keep = 3, threads = 0;
  int64_t steps = 0, epochs = 0, save_every = 0, val_every = 0, warmup_steps = 0;
  double lr = 1e-3, weight_decay = 0.0, clip = 1.0, ema_decay = 0.0, comm_timeout = 600.0;
  uint64_t seed = 0;
  bool dry_run = false, no_drop_last = false;
};

void declare(OptionSet& o, Config& c) {
  o.group("general")
      .standard_options(&c.config_file)
      .add("output-dir", &c.output_dir, "directory for checkpoints, metrics.jsonl and the final weights")
      .add("seed", &c.seed, "seed of the data order and the initial weights")
      .flag("dry-run", &c.dry_run, "print the resolved configuration and the plan, then exit")
      .add("log-every", &c.log_every, "steps between log lines when not on a terminal")
      .add("threads", &c.threads, "CPU threads per rank (0: the node's cores shared among its ranks)");
  o.group("data")
      .add("data", &c.data, "training CSV: a header row, then numeric rows")
      .add("target-cols", &c.target_cols, "comma-separated columns to predict; every other column is an input")
      .add("val-data", &c.val_data, "validation CSV with the same columns")
      .add("val-every", &c.val_every, "steps between validation passes (0: at the end only)")
      .add("batch-size", &c.batch_size, "rows per rank per micro-step")
      .flag("no-drop-last", &c.no_drop_last, "pad the last batch of an epoch by wrapping around");
  o.group("model").add("hidden", &c.hidden, "hidden layer widths, comma-separated (GELU between layers)");
  o.group("optimisation")
      .add("steps", &c.steps, "optimizer steps (or --epochs)")
      .add("epochs", &c.epochs, "epochs (or --steps)")
      .add("lr", &c.lr, "AdamW learning rate")
      .add("weight-decay", &c.weight_decay, "AdamW weight decay")
      .choice("schedule", &c.schedule, {"constant", "cosine"}, "learning-rate schedule after warm-up")
      .add("warmup-steps", &c.warmup_steps, "linear warm-up steps")
      .add("clip", &c.clip, "clip gradients to this global norm (0: off)")
      .add("ema-decay", &c.ema_decay, "EMA decay of the weights (0: no EMA)")
      .add("grad-accum", &c.grad_accum, "micro-steps accumulated per optimizer step");
  o.group("checkpoints")
      .add("save-every", &c.save_every, "steps between checkpoints (0: only at the end)")
      .add("keep", &c.keep, "checkpoints kept (0: all)")
      .add("resume", &c.resume, "auto (the output directory's latest checkpoint) or a checkpoint path")
      .choice("on-ckpt-error", &c.on_ckpt_error, {"warn", "fail"}, "what a failed checkpoint write does")
      .add("comm-timeout", &c.comm_timeout, "seconds a collective may take before the job is ended");
}

void check(bool ok, const char* option, const std::string& expected) {
  if (!ok) throw UsageError(fmt::format("option --{}: {}", option, expected));
}

std::vector<std::string> split(const std::string& list, char separator = ',') {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, separator);) items.push_back(item);
  return items;
}

std::vector<int64_t> hidden_widths(const std::string& text) {
  std::vector<int64_t> widths;
  for (const auto& item : split(text)) {
    size_t used = 0;
    int64_t width = 0;
    try {
      width = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    check(used == item.size() && width > 0, "hidden", fmt::format("'{}' is not a list of positive widths", text));
    widths.push_back(width);
  }
  return widths;
}

// The table's input and target columns as [N, F] and [N, T] fp32 tensors.
std::pair<at::Tensor, at::Tensor> split_columns(const data::CsvTable& table, const std::vector<std::string>& inputs,
                                                const std::vector<std::string>& targets) {
  const auto all = torch::from_blob(const_cast<double*>(table.values.data()),
                                    {table.rows, int64_t(table.columns.size())}, torch::kFloat64);
  auto pick = [&](const std::vector<std::string>& names) {
    std::vector<int64_t> index;
    for (const auto& name : names) index.push_back(table.column(name));
    return all.index_select(1, torch::tensor(index, torch::kLong)).to(torch::kFloat32);
  };
  return {pick(inputs), pick(targets)};
}

torch::nn::Sequential make_mlp(int64_t inputs, const std::vector<int64_t>& hidden, int64_t outputs) {
  torch::nn::Sequential mlp;
  int64_t width = inputs;
  for (const int64_t h : hidden) {
    mlp->push_back(torch::nn::Linear(width, h));
    mlp->push_back(torch::nn::GELU());
    width = h;
  }
  mlp->push_back(torch::nn::Linear(width, outputs));
  return mlp;
}

int run(distributed::World& world, int argc, char** argv) {
  set_option_names({{"output_dir", "output-dir"}, {"resume", "resume"}, {"comm_timeout", "comm-timeout"}});
  Config c;
  OptionSet options("csvfit", "--data train.csv --target-cols y1,y2 [--val-data val.csv] [options]");
  declare(options, c);
  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    if (outcome != OptionSet::Outcome::Run) return;
    check(!c.data.empty(), "data", "a training CSV is needed");
    check(!c.target_cols.empty(), "target-cols", "name the columns to predict");
    check(c.batch_size >= 1 && c.grad_accum >= 1, "batch-size", "--batch-size and --grad-accum must be at least 1");
    check((c.steps > 0) != (c.epochs > 0), "steps", "give --steps N or --epochs N (one of them)");
    check(c.lr > 0, "lr", "must be positive");
    check(c.ema_decay >= 0 && c.ema_decay < 1, "ema-decay", "must be in [0, 1)");
    hidden_widths(c.hidden);
  });
  if (outcome != OptionSet::Outcome::Run) {
    if (world.is_root()) std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  log::init(world.rank(), world.size());
  torch::set_num_threads(threads_per_rank(c.threads, world.local_size()));
  distributed::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(int64_t(c.comm_timeout * 1000));
  const auto comm = distributed::make_comm(world, distributed::Backend::Mpi, comm_options);

  // Every rank reads the CSVs (a shared file system, as for wantrain's shards).
  data::CsvTable train_table, val_table;
  std::vector<std::string> inputs, targets = split(c.target_cols);
  world.agree([&] {
    train_table = data::read_csv_table(c.data);
    for (const auto& name : targets) train_table.column(name);  // names the file and lists its columns
    for (const auto& name : train_table.columns)
      if (std::find(targets.begin(), targets.end(), name) == targets.end()) inputs.push_back(name);
    if (inputs.empty()) throw UsageError(fmt::format("{}: no input columns left besides --target-cols", c.data));
    if (!c.val_data.empty()) {
      val_table = data::read_csv_table(c.val_data);
      for (const auto& name : train_table.columns) val_table.column(name);
    }
  });
  auto [x, y] = split_columns(train_table, inputs, targets);

  // Standardisation from rank 0's statistics (broadcast: every rank must
  // scale alike); they belong to the model, so they are in its config.
  auto stats = torch::cat({x.mean(0), y.mean(0), x.std(0).clamp_min(1e-12), y.std(0).clamp_min(1e-12)});
  comm->broadcast(stats, {0});
  const int64_t F = x.size(1), T = y.size(1);
  const auto mean = stats.slice(0, 0, F + T), scale = stats.slice(0, F + T);
  auto standardise = [&](const at::Tensor& in, const at::Tensor& out) {
    return std::map<std::string, at::Tensor>{{"x", (in - mean.slice(0, 0, F)) / scale.slice(0, 0, F)},
                                             {"y", (out - mean.slice(0, F)) / scale.slice(0, F)}};
  };
  train::TensorSamples samples(standardise(x, y));
  const auto hidden = hidden_widths(c.hidden);
  const nlohmann::json model_json = {
      {"kind", "csvfit-mlp"},
      {"inputs", inputs},
      {"targets", targets},
      {"hidden", hidden},
      {"mean", std::vector<float>(mean.data_ptr<float>(), mean.data_ptr<float>() + F + T)},
      {"scale", std::vector<float>(scale.data_ptr<float>(), scale.data_ptr<float>() + F + T)}};

  train::RunSettings settings;
  settings.micro_batch = c.batch_size;
  settings.accumulation = c.grad_accum;
  settings.steps = c.steps;
  settings.epochs = c.epochs;
  settings.seed = c.seed;
  settings.drop_last = !c.no_drop_last;
  settings.lr = c.lr;
  settings.schedule = c.schedule == "cosine" ? train::Schedule::Cosine : train::Schedule::Constant;
  settings.warmup_steps = c.warmup_steps;
  settings.adamw.weight_decay = c.weight_decay;
  settings.clip = c.clip;
  settings.ema_decay = c.ema_decay;
  train::RunPlan plan;
  world.agree([&] { plan = train::plan_run(settings, world.size(), world.rank(), {samples.size()}); });
  if (world.is_root())
    std::cout << "csvfit: resolved configuration\n"
              << options.resolved_table()
              << fmt::format("data: {} ({} rows), inputs {}, targets {}\n{}", c.data, samples.size(),
                             fmt::join(inputs, ","), fmt::join(targets, ","), plan.describe_epoch())
              << fmt::format("model: MLP {} -> {} -> {}\n", F, fmt::join(hidden, " -> "), T) << plan.describe()
              << std::flush;
  if (c.dry_run) return kExitOk;

  train::FitOptions fit_options;
  fit_options.output_dir = c.output_dir;
  fit_options.save_every = c.save_every;
  fit_options.keep = c.keep;
  fit_options.val_every = c.val_every;
  fit_options.log_every = c.log_every;
  fit_options.stop_on_checkpoint_error = c.on_ckpt_error == "fail";
  fit_options.model_config = model_json.dump();
  train::StartPoint start = train::start_run(world, fit_options, c.resume, "the data and options of this run");

  torch::manual_seed(c.seed);
  auto mlp = make_mlp(F, hidden, T);
  train::RegressionObjective objective(mlp);
  data::DistributedSampler sampler({samples.size()}, plan.sampler);
  if (start.checkpoint) {
    objective.check_resume(start.checkpoint->objective_kind, start.checkpoint->objective, start.path);
    ckpt::check_fits(*start.checkpoint, start.path, objective.trainable(), c.ema_decay > 0);
    ckpt::copy_named(start.checkpoint->model, objective.trainable());
  }
  train::Engine engine(*comm, objective, plan.engine);
  train::FitRun fit_run;
  if (start.checkpoint) {
    train::restore_sampler(*start.checkpoint, start.path, sampler);
    engine.load_state(*start.checkpoint);
    fit_run.resumed = true;
    fit_run.first_epoch = start.checkpoint->state.epoch;
    start.checkpoint.reset();
  }
  train::SampledBatches batches(samples, std::move(sampler));
  std::unique_ptr<train::Validator> validator;
  if (!c.val_data.empty()) {
    auto [vx, vy] = split_columns(val_table, inputs, targets);
    validator =
        std::make_unique<train::Validator>(std::make_unique<train::TensorSamples>(standardise(vx, vy)), c.batch_size);
  }
  fit_run.engine = &engine;
  fit_run.batches = &batches;
  fit_run.validator = validator.get();
  fit_run.save_weights = [&](const std::string& dir) {
    model::write_safetensors(dir + "/model.safetensors", objective.trainable(), at::kFloat);
    std::ofstream(dir + "/model-config.json") << model_json.dump(2) << '\n';
    return fmt::format("weights: {0}/model.safetensors, config (with the standardisation) {0}/model-config.json", dir);
  };
  return train::fit(world, *comm, plan, fit_run, fit_options, start.best_val_loss);
}

}  // namespace
}  // namespace wt::csvfit

int main(int argc, char** argv) { return wt::app::run_app(argc, argv, wt::csvfit::run); }
