// World: ranks, node-local ranks, hosts, and agreement on usage errors.
#include <gtest/gtest.h>

#include <map>
#include <set>

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
