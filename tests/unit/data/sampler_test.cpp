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
  return DistributedSampler(DataLayout(std::move(shards)), {world, rank, batch, seed, drop_last, affinity});
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

namespace {

// Shards of sizes {7, 12, 5, 9, 6} in buckets {1, 0, 2, 0, 1}: bucket 0 holds
// samples 7-18 and 24-32 (21), bucket 1 holds 0-6 and 33-38 (13), bucket 2
// holds 19-23 (5).
DataLayout three_buckets() {
  DataLayout layout(std::vector<int64_t>{7, 12, 5, 9, 6});
  layout.shard_buckets = {1, 0, 2, 0, 1};
  layout.bucket_names = {"a", "b", "c"};
  return layout;
}
int bucket_of(int64_t i) { return (i >= 7 && i < 19) || (i >= 24 && i < 33) ? 0 : i >= 19 && i < 24 ? 2 : 1; }

std::vector<int64_t> bucketed_global_batch(const DataLayout& layout, int world, int64_t batch, int64_t epoch, int64_t k,
                                           bool drop_last = true) {
  std::vector<int64_t> out;
  for (int r = 0; r < world; ++r) {
    const auto b = DistributedSampler(layout, {world, r, batch, 7, drop_last, false}).batch(epoch, k);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

}  // namespace

// Every global batch is one bucket's; an epoch takes floor(n_b / BW) batches
// from bucket b, each sample at most once, and interleaves the buckets.
TEST(Sampler, BucketsGiveGlobalBatchesOfOneShapeEachSampleOncePerEpoch) {
  const auto layout = three_buckets();
  for (int world : {1, 2, 4}) {
    const int64_t batch = 4 / world;  // global batch 4
    const DistributedSampler s(layout, {world, 0, batch, 7, true, false});
    EXPECT_EQ(s.bucket_samples(), (std::vector<int64_t>{21, 13, 5}));
    EXPECT_EQ(s.bucket_batches(), (std::vector<int64_t>{5, 3, 1}));
    ASSERT_EQ(s.batches_per_epoch(), 9);
    std::set<int64_t> seen;
    std::vector<int> order;
    for (int64_t k = 0; k < 9; ++k) {
      const auto global = bucketed_global_batch(layout, world, batch, 3, k);
      ASSERT_EQ(global.size(), 4u);
      for (const auto i : global) {
        EXPECT_EQ(bucket_of(i), bucket_of(global[0])) << "batch " << k << " mixes buckets";
        EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
      }
      order.push_back(bucket_of(global[0]));
    }
    EXPECT_EQ(std::count(order.begin(), order.end(), 0), 5);
    EXPECT_EQ(std::count(order.begin(), order.end(), 2), 1);
    // Interleaved, not bucket after bucket (fixed by seed 7 and epoch 3).
    EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
  }
}

// 1 rank x 2B and 2 ranks x B see the same samples in every global batch,
// and the order depends on (seed, epoch) alone.
TEST(Sampler, BucketedGlobalBatchesAreTheSameOnAnyWorldSize) {
  const auto layout = three_buckets();
  for (bool drop_last : {true, false}) {
    const int64_t batches = DistributedSampler(layout, {1, 0, 6, 7, drop_last, false}).batches_per_epoch();
    EXPECT_EQ(batches, drop_last ? 3 + 2 + 0 : 4 + 3 + 1);
    for (int64_t epoch : {0, 1})
      for (int64_t k = 0; k < batches; ++k) {
        auto one = bucketed_global_batch(layout, 1, 6, epoch, k, drop_last);
        auto two = bucketed_global_batch(layout, 2, 3, epoch, k, drop_last);
        auto three = bucketed_global_batch(layout, 3, 2, epoch, k, drop_last);
        std::sort(one.begin(), one.end());
        std::sort(two.begin(), two.end());
        std::sort(three.begin(), three.end());
        EXPECT_EQ(one, two) << "epoch " << epoch << " batch " << k;
        EXPECT_EQ(one, three) << "epoch " << epoch << " batch " << k;
      }
    EXPECT_NE(bucketed_global_batch(layout, 1, 6, 0, 0, drop_last),
              bucketed_global_batch(layout, 1, 6, 1, 0, drop_last));
  }
}

// Without drop_last a bucket's tail wraps around within the bucket: every
// sample of every bucket is visited, the padding comes from the same bucket.
TEST(Sampler, BucketTailsWrapAroundWithinTheirBucket) {
  const auto layout = three_buckets();
  const DistributedSampler s(layout, {2, 0, 2, 7, false, false});
  EXPECT_EQ(s.bucket_batches(), (std::vector<int64_t>{6, 4, 2}));  // ceil(21/4), ceil(13/4), ceil(5/4)
  std::vector<std::multiset<int64_t>> seen(3);
  for (int64_t k = 0; k < s.batches_per_epoch(); ++k) {
    const auto global = bucketed_global_batch(layout, 2, 2, 0, k, false);
    for (const auto i : global) {
      EXPECT_EQ(bucket_of(i), bucket_of(global[0]));
      seen[size_t(bucket_of(i))].insert(i);
    }
  }
  const int64_t sizes[] = {21, 13, 5};
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(int64_t(std::set<int64_t>(seen[b].begin(), seen[b].end()).size()), sizes[b]) << "bucket " << b;
    EXPECT_EQ(int64_t(seen[b].size()), int64_t(s.bucket_batches()[b]) * 4) << "bucket " << b;
  }
}

// One bucket is exactly the order without buckets (runs and checkpoints
// from before buckets continue unchanged).
TEST(Sampler, OneBucketKeepsTheOrderWithoutBuckets) {
  DataLayout one(std::vector<int64_t>{13, 20, 8});
  one.shard_buckets = {0, 0, 0};
  for (int64_t k = 0; k < 5; ++k)
    EXPECT_EQ(DistributedSampler(one, {2, 1, 4, 7, true, false}).batch(2, k), make({13, 20, 8}, 2, 1, 4).batch(2, k));
}

TEST(Sampler, BucketsThatFillNoGlobalBatchAndShardAffinityAreRefused) {
  try {
    DistributedSampler(three_buckets(), {2, 0, 11, 7, true, false});
    FAIL();
  } catch (const wt::UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "data: the largest bucket's 21 samples are fewer than one global batch (2 ranks x 11 samples per rank "
                 "per step = 22); use more data, fewer ranks or a smaller batch");
  }
  EXPECT_THROW(DistributedSampler(three_buckets(), {1, 0, 2, 7, true, true}), wt::UsageError);
}

// Resuming a bucketed epoch at another world size continues with the same
// global batches.
TEST(Sampler, BucketedStateRestoresAcrossWorldSizes) {
  const auto layout = three_buckets();
  DistributedSampler a(layout, {2, 0, 2, 7, true, false}), a1(layout, {2, 1, 2, 7, true, false});
  for (int i = 0; i < 13; ++i) a.next(), a1.next();  // 9 a epoch: into epoch 1
  const SamplerState saved = a.state();
  EXPECT_EQ(saved, (SamplerState{1, 4 * 4}));
  DistributedSampler one(layout, {1, 0, 4, 7, true, false});
  one.restore(saved);
  for (int i = 0; i < 12; ++i) {
    auto together = a.next();
    const auto rank1 = a1.next();
    together.insert(together.end(), rank1.begin(), rank1.end());
    auto alone = one.next();
    std::sort(together.begin(), together.end());
    std::sort(alone.begin(), alone.end());
    EXPECT_EQ(together, alone) << i;
  }
}
