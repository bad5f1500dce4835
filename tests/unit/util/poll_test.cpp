// poll_until: asks until the answer is yes, or gives up after its bound.
#include <gtest/gtest.h>

#include "wantrain/util/poll.hpp"

TEST(PollUntil, AsksUntilDoneAndSaysSo) {
  int asked = 0;
  EXPECT_TRUE(wt::poll_until([&] { return ++asked == 3; }, std::chrono::seconds(60)));
  EXPECT_EQ(asked, 3);  // no call after the yes
}

TEST(PollUntil, GivesUpAfterItsBound) {
  int asked = 0;
  EXPECT_FALSE(wt::poll_until(
      [&] {
        ++asked;
        return false;
      },
      std::chrono::milliseconds(5)));
  EXPECT_GT(asked, 1);  // it asked again before giving up
}
