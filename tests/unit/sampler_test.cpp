// DistributedSampler: the permutation is portable, the ranks split an epoch
// exactly, global batches do not depend on the world size, and the state
// restores exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "wantrain/data/sampler.hpp"
#include "wantrain/util/error.hpp"

using namespace wt::data;

namespace {

DistributedSampler make(std::vector<int64_t> shards, int world, int rank, int64_t batch, bool drop_last = true,
                        bool affinity = false, uint64_t seed = 7) {
  return DistributedSampler(std::move(shards), {world, rank, batch, seed, drop_last, affinity});
}

// Every rank's batch k, concatenated in rank order.
std::vector<int64_t> global_batch(const std::vector<int64_t>& shards, int world, int64_t batch, int64_t epoch,
                                  int64_t k) {
  std::vector<int64_t> out;
  for (int r = 0; r < world; ++r) {
    const auto b = make(shards, world, r, batch).batch(epoch, k);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

}  // namespace

TEST(PortableRandom, MatchesTheSplitMix64Reference) {
  // SplitMix64 (Steele, Lea, Flood 2014) from state 0: published first outputs.
  PortableRandom r(0);
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(r.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(r.next(), 0x06C45D188009454Full);
}

TEST(PortableRandom, BelowIsInRangeAndCoversIt) {
  PortableRandom r(3);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 7000; ++i) ++seen[r.below(7)];
  for (int count : seen) EXPECT_GT(count, 800);  // ~1000 each
}

TEST(Sampler, PermutationIsAPermutationAndDependsOnSeedAndEpoch) {
  auto p = portable_permutation(1000, 42);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(p, portable_permutation(1000, 42));
  EXPECT_NE(p, portable_permutation(1000, 43));
  const auto s = make({100}, 1, 0, 10);
  EXPECT_NE(s.batch(0, 0), s.batch(1, 0));
  EXPECT_EQ(s.batch(1, 3), make({100}, 1, 0, 10).batch(1, 3));
}

TEST(Sampler, RanksSplitAnEpochExactlyWithoutOverlapDroppingOnlyTheTail) {
  const std::vector<int64_t> shards = {13, 20, 8};  // 41 samples
  for (int world : {1, 2, 3, 4}) {
    for (int64_t batch : {1, 2, 5}) {
      std::multiset<int64_t> seen;
      int64_t batches = -1;
      for (int r = 0; r < world; ++r) {
        const auto s = make(shards, world, r, batch);
        if (batches < 0) batches = s.batches_per_epoch();
        EXPECT_EQ(s.batches_per_epoch(), batches) << "every rank gets the same count";
        for (int64_t k = 0; k < s.batches_per_epoch(); ++k)
          for (auto i : s.batch(2, k)) seen.insert(i);
      }
      const int64_t used = (41 / (world * batch)) * world * batch;
      EXPECT_EQ(batches, 41 / (world * batch));
      EXPECT_EQ(static_cast<int64_t>(seen.size()), used);
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "no sample twice";
      // What is left out is less than one global batch.
      EXPECT_LT(41 - used, world * batch);
      for (auto i : seen) EXPECT_TRUE(i >= 0 && i < 41);
    }
  }
}

TEST(Sampler, GlobalBatchIsTheSameForOneRankWithDoubleBatch) {
  const std::vector<int64_t> shards = {17, 30};
  for (int64_t k = 0; k < 47 / 8; ++k) {
    auto two = global_batch(shards, 2, 4, 5, k), one = global_batch(shards, 1, 8, 5, k);
    std::sort(two.begin(), two.end());
    std::sort(one.begin(), one.end());
    EXPECT_EQ(two, one) << "batch " << k;
  }
}

TEST(Sampler, WithoutDropLastEveryRankPadsByWrappingAround) {
  const std::vector<int64_t> shards = {10};
  std::multiset<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    const auto s = make(shards, 3, r, 2, /*drop_last=*/false);
    EXPECT_EQ(s.batches_per_epoch(), 2);  // ceil(10 / 6)
    for (int64_t k = 0; k < 2; ++k)
      for (auto i : s.batch(0, k)) seen.insert(i);
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u) << "every sample, two of them twice";
}

TEST(Sampler, ShardAffinityReadsOnlyOwnShardsWithEqualBatchCounts) {
  const std::vector<int64_t> shards = {5, 9, 4, 6};  // rank 0: shards 0, 2 (9 samples); rank 1: 1, 3 (15)
  const auto r0 = make(shards, 2, 0, 2, true, true), r1 = make(shards, 2, 1, 2, true, true);
  EXPECT_EQ(r0.batches_per_epoch(), 4);  // floor(9 / 2), the fewer
  EXPECT_EQ(r1.batches_per_epoch(), 4);
  for (int64_t k = 0; k < 4; ++k) {
    for (auto i : r0.batch(1, k)) EXPECT_TRUE((i >= 0 && i < 5) || (i >= 14 && i < 18)) << i;
    for (auto i : r1.batch(1, k)) EXPECT_TRUE((i >= 5 && i < 14) || (i >= 18 && i < 24)) << i;
  }
  EXPECT_THROW(make({5, 9}, 3, 0, 1, true, true), wt::UsageError);  // fewer shards than ranks
}

TEST(Sampler, FewerSamplesThanAGlobalBatchIsAUsageError) {
  try {
    make({3, 4}, 2, 0, 4);
    FAIL();
  } catch (const wt::UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "data: 7 samples are fewer than one global batch (2 ranks x 4 samples per rank per step = 8); use "
                 "more data, fewer ranks or a smaller batch");
  }
}

TEST(Sampler, StateRestoresExactlyAndAcrossWorldSizes) {
  const std::vector<int64_t> shards = {50};
  auto a = make(shards, 2, 1, 3);         // 8 batches per epoch
  for (int i = 0; i < 11; ++i) a.next();  // into epoch 1
  const SamplerState saved = a.state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.consumed, 3 * 6);
  auto b = make(shards, 2, 1, 3);
  b.restore(saved);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next()) << i;

  // The same place in the epoch at world size 1 with the same global batch.
  auto one = make(shards, 1, 0, 6);
  one.restore(saved);
  auto two0 = make(shards, 2, 0, 3), two1 = make(shards, 2, 1, 3);
  two0.restore(saved);
  two1.restore(saved);
  auto together = two0.next();
  const auto rank1 = two1.next();
  together.insert(together.end(), rank1.begin(), rank1.end());
  auto alone = one.next();
  std::sort(together.begin(), together.end());
  std::sort(alone.begin(), alone.end());
  EXPECT_EQ(together, alone);

  EXPECT_THROW(one.restore({0, 5}), wt::UsageError);  // not a multiple of the global batch
}
