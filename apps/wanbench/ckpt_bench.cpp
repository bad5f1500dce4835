#include "bench_timing.hpp"
#include "ckpt_bench.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "model_bench.hpp"
#include "plausibility.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/writer.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "scratch_dataset.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/wan/run/wan_run.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/threads.hpp"
#include "wantrain/app/version.hpp"

namespace wt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
// The baseline: the same bytes written with write(2) in 8 MiB pieces, fsync'd.
double plain_write_seconds(const std::string& path, int64_t bytes) {
  static const std::vector<char> piece(8 << 20, 1);
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot create", path));
  for (int64_t left = bytes; left > 0;) {
    const auto n = ::write(fd, piece.data(), size_t(std::min<int64_t>(left, int64_t(piece.size()))));
    if (n <= 0) {
      ::close(fd);
      throw Error(fmt::format("{}: write failed", path));
    }
    left -= n;
  }
  ::fsync(fd);
  ::close(fd);
  const double seconds = seconds_since(start);
  fs::remove(path);
  return seconds;
}

struct CkptBenchConfig {
  std::string config_file, model_config, size = "16x16", dir;
  int64_t batch = 1, frames = 1;
  int steps = 10, rounds = 3, threads = 0;
  bool json = false, strict = false;
};

// Each round's seconds, and the checkpoint's size.
struct CkptTimes {
  std::vector<double> sync_s, snapshot_s, handoff_s, write_s, plain_s, quiet_s, busy_s;
  int64_t file_bytes = 0, tensor_bytes = 0;
};

// The options; UsageError naming the option. Fills `config` and the latents' `height`, `width`.
OptionSet::Outcome parse_ckpt_bench(distributed::World& world, int argc, char** argv, CkptBenchConfig& c,
                                    wan::WanConfig& config, int64_t& height, int64_t& width) {
  OptionSet options("wanbench ckpt", "--model-config JSON [options]");
  options.group("ckpt")
      .standard_options(&c.config_file)
      .add("model-config", &c.model_config, "model config JSON (data/configs/*.json)")
      .add("batch-size", &c.batch, "samples per step")
      .add("frames", &c.frames, "latent frames F")
      .add("size", &c.size, "latent HxW")
      .add("steps", &c.steps, "training steps timed per variant per round (the background write must fit in them)")
      .add("rounds", &c.rounds, "alternating rounds (medians are reported)")
      .add("dir", &c.dir, "where checkpoints are written (default: a new directory under $TMPDIR)")
      .add("threads", &c.threads, "CPU threads for training (0: the node's cores shared among its ranks)")
      .flag("json", &c.json, "print JSON instead of the table")
      .flag("strict", &c.strict, "exit 1 when a figure is unreliable (too short, too few rounds, an impossible ratio)");
  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    if (outcome != OptionSet::Outcome::Run) return;
    if (world.size() != 1) throw UsageError("wanbench ckpt: run it without mpirun (one process: rank 0 writes)");
    if (c.model_config.empty()) throw UsageError("option --model-config: the model config is required");
    if (c.steps < 1 || c.rounds < 1 || c.batch < 1 || c.frames < 1)
      throw UsageError("options --steps, --rounds, --batch-size, --frames: must be at least 1");
    std::tie(height, width) = parse_height_width(c.size, "size");
    config = load_bench_model_config(c.model_config);
  });
  if (outcome != OptionSet::Outcome::Run) std::cout << app::help_or_version(outcome, options);
  return outcome;
}

// The medians over the rounds, checked for plausibility, as JSON or a table; the exit status.
int report_ckpt_bench(const CkptBenchConfig& c, const wan::WanConfig& config, const std::string& dir,
                      const CkptTimes& times) {
  const auto& [sync_s, snapshot_s, handoff_s, write_s, plain_s, quiet_s, busy_s, file_bytes, tensor_bytes] = times;
  const double sync = median(sync_s), snap = median(snapshot_s), write = median(write_s), plain = median(plain_s);
  const double stall = median(busy_s) - median(quiet_s);
  // A background write cannot speed training up beyond noise, nor stall it by
  // more than a synchronous save would; the checkpoint's file cannot be
  // written faster than plain write(2)+fsync of the same bytes beyond noise.
  bench::Plausibility check;
  check.enough_rounds(c.rounds);
  check.resolvable("the synchronous save", sync);
  check.resolvable("the file write", write);
  check.resolvable("the steps without a write", median(quiet_s));
  check.within("the stall / synchronous save", stall / sync, -0.1, 1.1,
               "a background write cannot speed training up, nor stall it more than a synchronous save");
  check.within("the file write / plain write", plain / write, 0, 1.25,
               "the checkpoint file is written with no fewer bytes or fsyncs than the plain write");
  if (c.json) {
    std::cout << nlohmann::json{{"model_config", c.model_config},
                                {"checkpoint_bytes", file_bytes},
                                {"tensor_bytes", tensor_bytes},
                                {"sync_save_s", sync},
                                {"snapshot_s", snap},
                                {"snapshot_on_training_thread_s", median(handoff_s)},
                                {"file_write_s", write},
                                {"plain_write_s", plain},
                                {"steps_s", median(quiet_s)},
                                {"steps_with_background_write_s", median(busy_s)},
                                {"stall_s", stall},
                                {"stall_vs_sync", stall / sync},
                                {"write_vs_plain", plain / write},
                                {"unreliable", check.notes()}}
                     .dump(2)
              << '\n';
    return c.strict && !check.ok() ? kExitFailure : kExitOk;
  }
  fmt::print("wanbench ckpt: {} ({} parameters), AdamW + EMA, {} steps per variant, {} rounds (medians), dir {}\n",
             c.model_config, wan::parameter_count(config), c.steps, c.rounds, c.dir.empty() ? "$TMPDIR" : dir);
  fmt::print("  checkpoint: {:.1f} MB on disk ({:.1f} MB of tensors)\n", file_bytes / 1e6, tensor_bytes / 1e6);
  fmt::print("  synchronous save: {:.3f} s = snapshot {:.3f} s + file {:.3f} s (tmp, fsync, rename, latest)\n", sync,
             snap, write);
  fmt::print(
      "  the snapshot's time on the training thread: {:.3f} s (on the CPU its copies run beside the next step)\n",
      median(handoff_s));
  fmt::print("  file write {:.0f} MB/s vs plain write(2)+fsync of the same bytes {:.0f} MB/s: {:.0f}%\n",
             file_bytes / write / 1e6, file_bytes / plain / 1e6, 100 * plain / write);
  fmt::print("  {} steps: {:.3f} s without a write, {:.3f} s with a background write\n", c.steps, median(quiet_s),
             median(busy_s));
  fmt::print("  training stall of the background write: {:.3f} s = {:.1f}% of the synchronous save (goal <= 5%)\n",
             stall, 100 * stall / sync);
  if (!check.ok()) fmt::print("  UNRELIABLE: {}\n", fmt::join(check.notes(), "; "));
  return c.strict && !check.ok() ? kExitFailure : kExitOk;
}

}  // namespace

int run_ckpt_bench(distributed::World& world, int argc, char** argv) {
  CkptBenchConfig c;
  wan::WanConfig config;
  int64_t height = 0, width = 0;
  if (parse_ckpt_bench(world, argc, argv, c, config, height, width) != OptionSet::Outcome::Run) return kExitOk;

  train::RunSettings settings;
  settings.micro_batch = c.batch;
  settings.ema_decay = 0.999;
  settings.steps = 1 + 2 * c.steps * c.rounds + 1;
  torch::set_num_threads(threads_per_rank(c.threads, world.local_size()));
  auto comm = distributed::make_comm(world, distributed::Backend::Mpi, {});
  data::SampleShape shape;
  shape.channels = config.in_dim, shape.frames = c.frames, shape.height = height, shape.width = width;
  shape.text_len = config.text_len, shape.text_dim = config.text_dim;
  const ScratchDataset scratch(world, shape, c.batch * settings.steps);
  const std::string dir = c.dir.empty() ? scratch.directory + "-ckpt" : c.dir;
  fs::create_directories(dir);

  auto dataset = data::Dataset::open(scratch.directory);
  const auto plan = train::plan_run(settings, 1, 0, dataset.layout());
  wan::WanRun run(plan, {}, *comm, std::move(dataset), config, {});
  run.connect(*comm, {});
  auto parts = run.fit_run(nullptr);
  auto step = [&] {
    int64_t epoch = 0;
    run.engine().step(parts.batches->next(epoch));
  };
  step();  // AdamW's state exists from the first step on

  ckpt::WriterOptions writer_options;
  writer_options.directory = dir;
  writer_options.keep = 1;
  double best = std::numeric_limits<double>::infinity();
  CkptTimes times;
  auto& [sync_s, snapshot_s, handoff_s, write_s, plain_s, quiet_s, busy_s, file_bytes, tensor_bytes] = times;
  // Snapshots reuse their buffers, as wantrain's do; the first is untimed.
  ckpt::Checkpoint snapshot;
  run.engine().save_state(snapshot);
  ckpt::CheckpointWriter writer(writer_options);
  for (int round = 0; round < c.rounds; ++round) {
    // Synchronous: snapshot, then the whole write (tmp, fsync, rename, latest) on this thread.
    auto start = Clock::now();
    run.engine().save_state(snapshot);
    if (snapshot.filled.valid()) snapshot.filled.get();  // the whole copy, as a synchronous save makes it
    snapshot_s.push_back(seconds_since(start));
    const auto result = ckpt::CheckpointWriter::write_now(snapshot, writer_options, best);
    if (!result.ok()) throw Error(result.error);
    sync_s.push_back(seconds_since(start));
    write_s.push_back(result.seconds);
    file_bytes = int64_t(fs::file_size(result.path));
    tensor_bytes = snapshot.tensor_bytes();
    plain_s.push_back(plain_write_seconds(dir + "/plain.bin", file_bytes));

    // Steps with no write, then the same number with a background write
    // submitted before the first (save_state on this thread, as wantrain's).
    start = Clock::now();
    for (int i = 0; i < c.steps; ++i) step();
    quiet_s.push_back(seconds_since(start));
    start = Clock::now();
    run.engine().save_state(snapshot);
    handoff_s.push_back(seconds_since(start));
    writer.submit(std::exchange(snapshot, {}));
    for (int i = 0; i < c.steps; ++i) step();
    busy_s.push_back(seconds_since(start));
    if (writer.busy())
      fmt::print(stderr, "wanbench ckpt: the background write outlasted {} steps; raise --steps\n", c.steps);
    for (const auto& r : writer.drain())
      if (!r.ok()) throw Error(r.error);
    snapshot = writer.recycle();
  }
  std::error_code ignored;
  if (c.dir.empty()) fs::remove_all(dir, ignored);

  return report_ckpt_bench(c, config, dir, times);
}

}  // namespace wt
