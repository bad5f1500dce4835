// Device placement on real GPUs, in two modes (registered in CMakeLists.txt):
//
//   (no argument)     every rank's device, on whatever the machine has: one
//                     GPU per rank makes auto take NCCL and the table show
//                     bus ids; two ranks on one GPU (a one-GPU box) make auto
//                     fall back to MPI with one warning and an explicit nccl
//                     an error naming the ranks and the device.
//   --join-deadline   the NCCL join under the comm timeout: rank 1 is held
//                     back (WANTRAIN_TEST_DELAY=nccl_join:...), and rank 0
//                     must end the job with the timeout's one line instead
//                     of waiting in the join.
//
// Without a GPU (or without what a mode needs) every rank prints SKIPPED and
// exits 77, which CTest shows as skipped.
#include <cstdio>
#include <cstring>
#include <string>

#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"

namespace {

constexpr int kSkipped = 77;
using wt::distributed::Backend;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::printf("FAILED: %s\n", what.c_str());
  ++failures;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int placement(wt::distributed::World& world) {
  const auto placement = wt::distributed::place_gpus(world);
  if (!placement.any_gpu()) {
    if (world.is_root()) std::printf("SKIPPED: no rank sees a GPU: %s\n", placement.problem.c_str());
    return kSkipped;
  }
  const auto choice = wt::distributed::choose_backend(world, Backend::Auto);
  if (placement.usable()) {
    expect(choice.backend == Backend::Nccl, "auto takes NCCL when every rank has its own GPU");
    for (const auto& d : placement.ranks)
      expect(contains(d.describe(), "(PCI "), "rank " + std::to_string(d.rank) + " names its bus id: " + d.describe());
    return 0;
  }
  // Two ranks on one GPU: the one-GPU box.
  expect(contains(placement.problem, "would share one GPU"), "the problem names the sharing: " + placement.problem);
  expect(choice.backend == Backend::Mpi, "auto falls back to MPI");
  expect(contains(choice.fallback, "using MPI on the CPU instead"), "the fallback says so: " + choice.fallback);
  expect(
      contains(wt::distributed::cpu_on_gpu_nodes(world, choice, wt::distributed::nvidia_gpus_on_node()), "NVIDIA GPU"),
      "computing on the CPU of a GPU node is news");
  try {
    wt::distributed::make_comm(world, Backend::Nccl);
    expect(false, "an explicit nccl on a shared GPU is refused");
  } catch (const wt::UsageError& e) {
    expect(contains(e.what(), "would share one GPU"), std::string("the error names the sharing: ") + e.what());
  } catch (const wt::distributed::CollectiveExit& exit) {
    expect(exit.code == 2, "the agreed exit is a usage error");
  }
  return 0;
}

int join_deadline(wt::distributed::World& world) {
  const auto placement = wt::distributed::place_gpus(world);
  if (world.size() < 2 || !placement.usable()) {
    if (world.is_root())
      std::printf("SKIPPED: the join deadline needs 2 ranks with a GPU each: %s\n", placement.problem.c_str());
    return kSkipped;
  }
  wt::distributed::CommOptions options;
  options.timeout = std::chrono::seconds(2);
  const auto comm = wt::distributed::make_nccl_comm(world, placement, options);
  std::printf("FAILED: the NCCL join returned although rank 1 was held back past the deadline\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  wt::distributed::World world(argc, argv);
  const bool deadline = argc > 1 && std::strcmp(argv[1], "--join-deadline") == 0;
  int status = deadline ? join_deadline(world) : placement(world);
  if (status == 0 && failures > 0) status = 1;
  world.finalize();
  return status;
}
