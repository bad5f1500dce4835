// World: ranks, node-local ranks, hosts, and agreement on usage errors.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "wantrain/distributed/world.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/distributed/mpi_check.hpp"

TEST(World, RanksAreDistinctAndLocalRanksNumberEachNodeFromZero) {
  const auto& world = test_world();
  ASSERT_GE(world.size(), 1);
  const auto peers = world.peers();
  ASSERT_EQ(static_cast<int>(peers.size()), world.size());
  std::map<std::string, std::set<int>> local_by_host;
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(peers[r].rank, r);
    local_by_host[peers[r].host].insert(peers[r].local_rank);
  }
  for (const auto& [host, locals] : local_by_host) {
    // Each node's local ranks are exactly 0..local_size-1.
    EXPECT_EQ(*locals.begin(), 0) << host;
    EXPECT_EQ(*locals.rbegin(), static_cast<int>(locals.size()) - 1) << host;
    for (const auto& p : peers) {
      if (p.host == host) {
        EXPECT_EQ(p.local_size, static_cast<int>(locals.size()));
      }
    }
  }
  EXPECT_EQ(peers[world.rank()].host, world.host());
}

TEST(World, AgreeMakesEveryRankLeaveWhenOneRankHasAUsageError) {
  const auto& world = test_world();
  const int failing = world.size() - 1;
  try {
    world.agree([&] {
      if (world.rank() == failing) throw wt::UsageError("option --test: bad on the last rank only");
    });
    FAIL() << "agree() returned although rank " << failing << " failed";
  } catch (const wt::distributed::CollectiveExit& exit) {
    EXPECT_EQ(exit.code, wt::kExitUsage);
  }
}

TEST(World, AgreeReturnsWhenEveryRankSucceeds) {
  const auto& world = test_world();
  int runs = 0;
  world.agree([&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

TEST(World, BroadcastGivesEveryRankRankZerosText) {
  const auto& world = test_world();
  // Rank r starts with r + 1 characters; rank 0's single 'a' wins, then an empty text does.
  std::string text(size_t(world.rank() + 1), char('a' + world.rank()));
  world.broadcast(text);
  EXPECT_EQ(text, "a");
  std::string empty = world.is_root() ? "" : "not empty";
  world.broadcast(empty);
  EXPECT_EQ(empty, "");
}

TEST(MpiCheck, FailedCallThrowsWithTheFunctionAndReason) {
  const auto& world = test_world();
  int value = 0;
  try {
    // A root outside the world is an error on every rank, before any message.
    MPI_CHECK(MPI_Bcast(&value, 1, MPI_INT, world.size() + 5, world.comm()));
    FAIL() << "MPI_CHECK did not throw";
  } catch (const wt::Error& e) {
    const std::string message = e.what();
    // The function's name, never the C++ expression of its call; the rank and
    // host are the error line's prefix (util/fatal.hpp), not the message's.
    EXPECT_NE(message.find("MPI MPI_Bcast failed: "), std::string::npos) << message;
    EXPECT_EQ(message.find("MPI_INT"), std::string::npos) << message;
    EXPECT_NE(message.find("world_test.cpp:"), std::string::npos) << message;
    EXPECT_NE(message.find("root"), std::string::npos) << message;  // MPI_ERR_ROOT's own text
  }
}

// A split (wantrain --experts' rank groups): each rank its own group here,
// ranked within it, agreeing and gathering within it only, with the job's
// rank and its node-local rank (GPUs are the node's) kept.
TEST(World, ASplitRanksWithinItsGroupAndKeepsTheJobsRankAndNodeLocalRank) {
  const auto& world = test_world();
  const auto group = world.split(world.rank());
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
  EXPECT_TRUE(group->is_root());
  EXPECT_EQ(group->job_rank(), world.rank());
  EXPECT_EQ(group->job_size(), world.size());
  EXPECT_EQ(group->local_rank(), world.local_rank());
  EXPECT_EQ(group->local_size(), world.local_size());
  // A usage error on the last rank leaves its own group only.
  bool left = false;
  try {
    group->agree([&] {
      if (world.rank() == world.size() - 1) throw wt::UsageError("option --test: bad in the last rank's group");
    });
  } catch (const wt::distributed::CollectiveExit&) {
    left = true;
  }
  EXPECT_EQ(left, world.rank() == world.size() - 1);
  const auto mine = group->all_gather(std::to_string(world.rank()), "test");
  EXPECT_EQ(mine, std::vector<std::string>{std::to_string(world.rank())});
  // Together again: one group of every rank, in the job's order.
  const auto all = world.split(0);
  EXPECT_EQ(all->rank(), world.rank());
  EXPECT_EQ(all->size(), world.size());
}
