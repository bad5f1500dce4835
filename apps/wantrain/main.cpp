// wantrain: train or distill a Wan diffusion transformer, data-parallel over MPI ranks.
#include <fmt/format.h>
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "wantrain/app/app.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/data/sampler.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/model/model_config.hpp"
#include "wantrain/model/projection.hpp"
#include "wantrain/train/data_fits_model.hpp"
#include "wantrain/train/lr_schedule.hpp"
#include "wantrain/train/teacher.hpp"
#include "wantrain/train/train_config.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/log.hpp"
#include "wantrain/util/options.hpp"
#include "export_command.hpp"
#include "train_run.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/config.hpp"

namespace {

std::string world_table(const wt::distributed::World& world, const wt::distributed::Comm& comm,
                        const wt::TrainConfig& cfg) {
  const auto peers = world.peers();
  std::string out =
      fmt::format("world: {} rank{}, backend {}\n", world.size(), world.size() == 1 ? "" : "s", comm.backend());
  out += fmt::format("  {:>5}  {:<24}  {:>10}  {:<8}  {:>7}\n", "rank", "host", "local rank", "device", "threads");
  for (const auto& p : peers) {
    const std::string device = comm.device().is_cuda() ? fmt::format("cuda:{}", p.local_rank) : std::string("cpu");
    out +=
        fmt::format("  {:>5}  {:<24}  {:>10}  {:<8}  {:>7}\n", p.rank, p.host,
                    fmt::format("{}/{}", p.local_rank, p.local_size), device, wt::threads_per_rank(cfg, p.local_size));
  }
  return out;
}

int run(wt::distributed::World& world, int argc, char** argv) {
  wt::TrainConfig cfg;
  wt::OptionSet options("wantrain",
                        "[--config run.ini] [options]\n       wantrain export --checkpoint PATH --out FILE [--ema] "
                        "(see wantrain export --help)");
  wt::declare_options(options, cfg);

  auto outcome = wt::OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    if (outcome == wt::OptionSet::Outcome::Run) wt::validate(cfg);
  });
  if (outcome == wt::OptionSet::Outcome::Help) {
    if (world.is_root()) std::cout << options.help_text();
    return wt::kExitOk;
  }
  if (outcome == wt::OptionSet::Outcome::Version) {
    if (world.is_root()) std::cout << wt::app::version_text("wantrain");
    return wt::kExitOk;
  }

  // The data are checked on every rank before anything else starts; a bad
  // dataset is one line and status 2 for the whole job.
  std::string data_summary = "data: none given (--data)\n";
  std::optional<wt::data::Dataset> dataset;
  int64_t steps_per_epoch = 0;
  world.agree([&] {
    if (cfg.data.empty()) return;
    dataset = wt::data::Dataset::open(cfg.data);
    // One sampler batch is a rank's whole optimizer step (--batch-size x --grad-accum).
    const wt::data::DistributedSampler sampler(
        dataset->shard_sizes(), {world.size(), world.rank(), int64_t(cfg.batch_size) * cfg.grad_accum, cfg.seed,
                                 !cfg.no_drop_last, cfg.shard_affinity});
    steps_per_epoch = sampler.batches_per_epoch();
    const int64_t used = sampler.batches_per_epoch() * sampler.global_batch();
    data_summary = fmt::format(
        "data: {} ({} shards, {} samples), latents {}, text_emb {}\n"
        "      {} steps per epoch; {} samples per epoch{}\n",
        cfg.data, dataset->shards().size(), dataset->size(), dataset->shape().latents_string(),
        dataset->shape().text_string(), sampler.batches_per_epoch(), used,
        cfg.shard_affinity       ? std::string(" (shard affinity)")
        : used > dataset->size() ? fmt::format(" ({} padded by wrap-around)", used - dataset->size())
        : used < dataset->size() ? fmt::format(" ({} dropped)", dataset->size() - used)
                                 : std::string(" (all)"));
  });

  // The model config, and whether the data fit it, likewise.
  std::string model_summary = "model: none given (--model-config)\n";
  std::optional<wt::model::WanConfig> model_config;
  world.agree([&] {
    if (cfg.model_config.empty()) return;
    const auto config = wt::model::load_model_config(cfg.model_config);
    model_config = config;
    if (dataset) wt::train::check_data_fits_model(dataset->shape(), cfg.data, config, cfg.model_config);
    if (!cfg.val_data.empty())
      wt::train::check_data_fits_model(wt::data::Dataset::open(cfg.val_data).shape(), cfg.val_data, config,
                                       cfg.model_config);
    const int64_t params = wt::model::parameter_count(config);
    model_summary = fmt::format("model: {}: {} parameters ({:.1f} MB in fp32), dim {}, {} layers, {} heads of {}\n",
                                cfg.model_config, params, double(params) * 4 / 1e6, config.dim, config.num_layers,
                                config.num_heads, config.head_dim());
  });

  // Distillation: the teacher's config, whether the data fit it too, and
  // whether the student can be projected from it, before any weights load.
  std::optional<wt::model::WanConfig> teacher_config;
  world.agree([&] {
    if (cfg.mode != "distill") return;
    const auto config = wt::train::resolve_teacher_config(cfg.teacher, cfg.teacher_config);
    teacher_config = config;
    const std::string source = (cfg.teacher_config.empty() ? "the config stored in --teacher " + cfg.teacher
                                                           : "--teacher-config " + cfg.teacher_config) +
                               " (the teacher's)";
    // An image student's frames reach a video teacher as stills (train/teacher.hpp).
    auto seen = config;
    if (model_config && model_config->patch_size[0] == 1) seen.patch_size[0] = 1;
    if (dataset) wt::train::check_data_fits_model(dataset->shape(), cfg.data, seen, source);
    if (model_config && cfg.student_init == "projection" && cfg.init.empty())
      wt::model::check_projectable(config, "--teacher " + cfg.teacher, *model_config,
                                   "--model-config " + cfg.model_config);
    const std::string student_init = !cfg.init.empty() ? "--init " + cfg.init : cfg.student_init;
    model_summary +=
        fmt::format("teacher: {}: {} parameters, dim {}, {} layers, held in {}; student init: {}{}\n", cfg.teacher,
                    wt::model::parameter_count(config), config.dim, config.num_layers, cfg.teacher_precision,
                    student_init, cfg.resume.empty() ? "" : " (when --resume finds no checkpoint)");
  });

  wt::log::init(world.rank(), world.size());
  torch::set_num_threads(wt::threads_per_rank(cfg, world.local_size()));

  wt::distributed::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(cfg.comm_timeout * 1000));
  std::unique_ptr<wt::distributed::Comm> comm;
  world.agree(
      [&] { comm = wt::distributed::make_comm(world, wt::distributed::parse_backend(cfg.backend), comm_options); });

  const std::string table = world_table(world, *comm, cfg);
  const int64_t effective_batch = int64_t(cfg.batch_size) * world.size() * cfg.grad_accum;
  const int64_t total_steps = cfg.steps > 0 ? cfg.steps : cfg.epochs * steps_per_epoch;
  if (world.is_root()) {
    std::cout << "wantrain " << WANTRAIN_VERSION << ": resolved configuration\n"
              << options.resolved_table() << table << data_summary << model_summary
              << fmt::format("effective batch: {} per rank x {} ranks x {} accumulation steps = {}\n", cfg.batch_size,
                             world.size(), cfg.grad_accum, effective_batch)
              << fmt::format("optimizer: AdamW, lr {:.4g}{}, {} schedule, {} warm-up steps, precision {}\n",
                             wt::train::scaled_lr(cfg.lr, effective_batch, cfg.scale_lr),
                             cfg.scale_lr ? fmt::format(" (--lr {} x effective batch {})", cfg.lr, effective_batch)
                                          : std::string(),
                             cfg.schedule, cfg.warmup_steps, cfg.precision)
              << (total_steps > 0
                      ? fmt::format("steps: {}{}\n", total_steps,
                                    cfg.epochs > 0 ? fmt::format(" ({} epochs)", cfg.epochs) : std::string())
                      : std::string("steps: none given (--steps or --epochs)\n"))
              << std::flush;
  }
  comm->barrier();  // the collectives work end to end
  if (cfg.dry_run) return wt::kExitOk;

  world.agree([&] {
    if (!dataset) throw wt::UsageError("option --data: a training dataset is needed (or --dry-run)");
    if (!model_config) throw wt::UsageError("option --model-config: a model config is needed (or --dry-run)");
  });
  nlohmann::json run_config = nlohmann::json::object();
  for (const auto& option : options.resolved()) run_config[option.name] = option.value;
  return run_training(world, *comm, cfg, std::move(*dataset), *model_config, teacher_config, run_config.dump());
}

}  // namespace

int main(int argc, char** argv) {
  // `wantrain export ...` is a subcommand; everything else is a training run.
  if (argc > 1 && std::string(argv[1]) == "export") return wt::app::run_app(argc - 1, argv + 1, wt::run_export);
  return wt::app::run_app(argc, argv, run);
}
