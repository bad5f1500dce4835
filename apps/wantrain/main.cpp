// wantrain: train or distill a Wan diffusion transformer, data-parallel over MPI ranks.
#include <fmt/format.h>
#include <torch/torch.h>

#include <iostream>
#include <optional>

#include "dist/app.hpp"
#include "dist/backend.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "dist/world.hpp"
#include "model/model_config.hpp"
#include "train/data_fits_model.hpp"
#include "train/train_config.hpp"
#include "util/error.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"
#include "util/options.hpp"
#include "version.hpp"
#include "wantrain/config.hpp"

namespace {

std::string world_table(const wt::World& world, const wt::Comm& comm, const wt::TrainConfig& cfg) {
  const auto peers = world.peers();
  std::string out = fmt::format("world: {} rank{}, backend {}\n", world.size(), world.size() == 1 ? "" : "s",
                                comm.backend());
  out += fmt::format("  {:>5}  {:<24}  {:>10}  {:<8}  {:>7}\n", "rank", "host", "local rank", "device", "threads");
  for (const auto& p : peers) {
    const std::string device =
        comm.device().is_cuda() ? fmt::format("cuda:{}", p.local_rank) : std::string("cpu");
    out += fmt::format("  {:>5}  {:<24}  {:>10}  {:<8}  {:>7}\n", p.rank, p.host,
                       fmt::format("{}/{}", p.local_rank, p.local_size), device,
                       wt::threads_per_rank(cfg, p.local_size));
  }
  return out;
}

int run(wt::World& world, int argc, char** argv) {
  wt::TrainConfig cfg;
  wt::OptionSet options("wantrain", "[--config run.ini] [options]");
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
    if (world.is_root()) std::cout << wt::version_text("wantrain");
    return wt::kExitOk;
  }

  // The data are checked on every rank before anything else starts; a bad
  // dataset is one line and status 2 for the whole job.
  std::string data_summary = "data: none given (--data)\n";
  std::optional<wt::data::SampleShape> sample_shape;
  world.agree([&] {
    if (cfg.data.empty()) return;
    const auto dataset = wt::data::Dataset::open(cfg.data);
    sample_shape = dataset.shape();
    const wt::data::DistributedSampler sampler(
        dataset.shard_sizes(), {world.size(), world.rank(), cfg.batch_size, cfg.seed, !cfg.no_drop_last,
                                cfg.shard_affinity});
    const int64_t used = sampler.batches_per_epoch() * sampler.global_batch();
    data_summary = fmt::format(
        "data: {} ({} shards, {} samples), latents {}, text_emb {}\n"
        "      {} batches per epoch per rank; {} samples per epoch{}\n",
        cfg.data, dataset.shards().size(), dataset.size(), dataset.shape().latents_string(),
        dataset.shape().text_string(), sampler.batches_per_epoch(), used,
        cfg.shard_affinity       ? std::string(" (shard affinity)")
        : used > dataset.size()  ? fmt::format(" ({} padded by wrap-around)", used - dataset.size())
        : used < dataset.size()  ? fmt::format(" ({} dropped)", dataset.size() - used)
                                 : std::string(" (all)"));
  });

  // The model config, and whether the data fit it, likewise.
  std::string model_summary = "model: none given (--model-config)\n";
  world.agree([&] {
    if (cfg.model_config.empty()) return;
    const auto config = wt::model::load_model_config(cfg.model_config);
    if (sample_shape) wt::train::check_data_fits_model(*sample_shape, cfg.data, config, cfg.model_config);
    const int64_t params = wt::model::parameter_count(config);
    model_summary = fmt::format("model: {}: {} parameters ({:.1f} MB in fp32), dim {}, {} layers, {} heads of {}\n",
                                cfg.model_config, params, double(params) * 4 / 1e6, config.dim, config.num_layers,
                                config.num_heads, config.head_dim());
  });

  wt::log::init(world.rank(), world.size());
  torch::set_num_threads(wt::threads_per_rank(cfg, world.local_size()));

  wt::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(cfg.comm_timeout * 1000));
  std::unique_ptr<wt::Comm> comm;
  world.agree([&] { comm = wt::make_comm(world, wt::parse_backend(cfg.backend), comm_options); });

  const std::string table = world_table(world, *comm, cfg);
  if (world.is_root()) {
    std::cout << "wantrain " << WANTRAIN_VERSION << ": resolved configuration\n"
              << options.resolved_table() << table << data_summary << model_summary
              << fmt::format("effective batch: {} per rank x {} ranks x {} accumulation steps = {}\n",
                             cfg.batch_size, world.size(), cfg.grad_accum,
                             static_cast<std::int64_t>(cfg.batch_size) * world.size() * cfg.grad_accum)
              << std::flush;
  }
  comm->barrier();  // the collectives work end to end
  if (cfg.dry_run) return wt::kExitOk;

  world.agree([] {
    throw wt::UsageError("training is not in this build yet (the Trainer lands with issue #5); "
                         "use --dry-run to check a configuration");
  });
  return wt::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) { return wt::run_app(argc, argv, run); }
