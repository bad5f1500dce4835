// wanbench: measurements of wantrain's pieces, side by side with their baselines.
#include <fmt/format.h>

#include <cstring>
#include <iostream>

#include "allreduce_bench.hpp"
#include "ckpt_bench.hpp"
#include "io_bench.hpp"
#include "model_bench.hpp"
#include "optim_bench.hpp"
#include "sample_bench.hpp"
#include "step_bench.hpp"
#include "t5_bench.hpp"
#include "vae_bench.hpp"
#include "wantrain/app/app.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/app/version.hpp"

namespace {

constexpr const char* kUsage =
    "usage: wanbench COMMAND [options]\n"
    "commands:\n"
    "  allreduce   Comm all-reduce vs raw MPI_Allreduce, sizes swept (time, algbw, busbw, #wrong)\n"
    "  ckpt        checkpoint size; synchronous save vs the training stall of a background one; write rate vs\n"
    "              a plain write of the same bytes (run without mpirun)\n"
    "  io          Loader throughput vs a raw sequential read of the same bytes (run without mpirun)\n"
    "  model       WanModel forward and forward+backward seconds per sample and peak RSS (run without mpirun)\n"
    "  optim       the optimizer phase on a model's parameters: AdamW's loop vs the multi-tensor and fused steps,\n"
    "              the EMA per tensor vs multi-tensor (run without mpirun)\n"
    "  sample      wansample's pipeline: seconds per solver step on a model of random weights, on one rank or\n"
    "              split over the ranks of mpirun\n"
    "  step        Trainer step time and split, with the Reducer and with communication skipped; gradient sync\n"
    "              of the whole model by the Reducer vs raw MPI_Allreduce\n"
    "  t5          umT5 text encoder seconds per forward, weight bytes and peak RSS (run without mpirun)\n"
    "  vae         Wan2.1 video VAE encode and decode seconds and peak RSS, video lengths each in a process of\n"
    "              its own (run without mpirun)\n"
    "run 'wanbench COMMAND --help' for its options\n";

int run(wt::distributed::World& world, int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "allreduce") return wt::run_allreduce_bench(world, argc - 1, argv + 1);
  if (command == "ckpt") return wt::run_ckpt_bench(world, argc - 1, argv + 1);
  if (command == "io") return wt::run_io_bench(world, argc - 1, argv + 1);
  if (command == "model") return wt::run_model_bench(world, argc - 1, argv + 1);
  if (command == "optim") return wt::run_optim_bench(world, argc - 1, argv + 1);
  if (command == "sample") return wt::run_sample_bench(world, argc - 1, argv + 1);
  if (command == "step") return wt::run_step_bench(world, argc - 1, argv + 1);
  if (command == "t5") return wt::run_t5_bench(world, argc - 1, argv + 1);
  if (command == "vae") return wt::run_vae_bench(world, argc - 1, argv + 1);
  if (command == "--help" || command == "-h") {
    if (world.is_root()) std::cout << kUsage;
    return wt::kExitOk;
  }
  if (command == "--version") {
    if (world.is_root()) std::cout << wt::app::version_text("wanbench");
    return wt::kExitOk;
  }
  world.agree([&] {
    throw wt::UsageError(
        command.empty()
            ? std::string("no command given (allreduce|ckpt|io|model|optim|sample|step|t5|vae)")
            : fmt::format("unknown command '{}' (allreduce|ckpt|io|model|optim|sample|step|t5|vae)", command));
  });
  return wt::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) { return wt::app::run_app(argc, argv, run); }
