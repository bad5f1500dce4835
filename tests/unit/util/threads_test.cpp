// Threads per rank: the node's cores shared among its ranks unless given.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "wantrain/util/threads.hpp"

TEST(Threads, DefaultToTheNodesCoresSharedAmongItsRanks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(wt::threads_per_rank(0, 1), cores);
  EXPECT_EQ(wt::threads_per_rank(0, cores * 2), 1);
  EXPECT_EQ(wt::threads_per_rank(3, 8), 3);
}
