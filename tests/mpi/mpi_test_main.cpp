// main of the 2-rank GoogleTest suites: MPI up, the World shared with the
// tests, rank 0 prints the usual report, other ranks print only failures, and
// every rank returns the same verdict (a failure on any rank fails the job).
#include <gtest/gtest.h>

#include <cstdio>

#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/util/log.hpp"

namespace {

wt::distributed::World* g_world = nullptr;
wt::distributed::Comm* g_comm = nullptr;

// On ranks other than 0: print failed assertions, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

wt::distributed::World& test_world() { return *g_world; }
wt::distributed::Comm& test_comm() { return *g_comm; }

int main(int argc, char** argv) {
  wt::distributed::World world(argc, argv);
  g_world = &world;
  ::testing::InitGoogleTest(&argc, argv);
  wt::log::init(world.rank(), world.size());
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world.rank()));
  }
  int mine = 0;
  {
    wt::distributed::MpiComm comm(world, wt::distributed::CommOptions{std::chrono::seconds(60)});
    g_comm = &comm;
    mine = RUN_ALL_TESTS() != 0 ? 1 : 0;
    g_comm = nullptr;
  }  // the Comm goes before MPI_Finalize
  int any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world.comm());
  if (any && world.rank() == 0) std::fprintf(stderr, "some rank failed: the suite fails on every rank\n");
  world.finalize();
  return any;
}
