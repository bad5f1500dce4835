// wandata: make, look at, check and re-shard wantrain datasets (HDF5 shards).
// A serial tool but for encode, which runs under mpirun as well.
#include <fmt/format.h>

#include <iostream>
#include <map>

#include "commands.hpp"
#include "wantrain/app/app.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/app/version.hpp"

namespace {

constexpr const char* kUsage =
    "usage: wandata COMMAND [options]\n"
    "commands:\n"
    "  encode   videos, images and captions -> a dataset (the Wan VAE's latents and umT5's embeddings)\n"
    "  decode   a sample's latents through the VAE to a video or PNG frames\n"
    "  synth    write a synthetic, learnable dataset (moving blobs described by the text embedding)\n"
    "  inspect  list a dataset's shards: samples, shapes, dtypes, bytes\n"
    "  verify   read every shard fully and report every problem (exit 1 if any)\n"
    "  split    re-shard one dataset into more (or fewer) shards\n"
    "  merge    join datasets into one, re-sharded\n"
    "  stage    copy to a node's local disk the shards its ranks read with wantrain --shard-affinity\n"
    "run 'wandata COMMAND --help' for its options; docs/data-format.md describes the format\n";

int run(wt::distributed::World& world, int argc, char** argv) {
  using Command = int (*)(wt::distributed::World&, int, char**);
  const std::map<std::string, Command> commands = {
      {"synth", wt::run_synth}, {"inspect", wt::run_inspect}, {"verify", wt::run_verify}, {"split", wt::run_split},
      {"merge", wt::run_merge}, {"encode", wt::run_encode},   {"decode", wt::run_decode}};
  const std::string command = argc > 1 ? argv[1] : "";
  if (const auto it = commands.find(command); it != commands.end()) return it->second(world, argc - 1, argv + 1);
  if (command == "--help" || command == "-h") {
    std::cout << kUsage;
    return wt::kExitOk;
  }
  if (command == "--version") {
    std::cout << wt::app::version_text("wandata");
    return wt::kExitOk;
  }
  throw wt::UsageError(
      command.empty()
          ? "no command given (encode|decode|synth|inspect|verify|split|merge|stage)"
          : fmt::format("unknown command '{}' (encode|decode|synth|inspect|verify|split|merge|stage)", command));
}

}  // namespace

int main(int argc, char** argv) {
  // stage runs once per node, often from srun: no MPI world, so one node's
  // error is its own and does not abort the copies on the others.
  if (argc > 1 && std::string(argv[1]) == "stage") return wt::app::run_local(argc - 1, argv + 1, wt::run_stage);
  return wt::app::run_app(argc, argv, run);
}
