// The Loader on 2 ranks: an epoch is split exactly between the ranks, and
// global batch k holds the same samples as batch k of one rank with the
// whole global batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "../common/shards.hpp"
#include "wantrain/data/loader.hpp"
#include "mpi_test_env.hpp"

using namespace wt;

namespace {

// A dataset written by rank 0 into a directory every rank can see.
std::string shared_dataset(const std::string& name, const data::SampleShape& shape) {
  const std::string dir = ::testing::TempDir() + name;
  if (test_world().rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    wt::testing::write_shard(dir + "/a.h5", shape, 9, 0);
    wt::testing::write_shard(dir + "/b.h5", shape, 14, 100);
  }
  test_world().barrier();
  return dir;
}

}  // namespace

TEST(DistributedLoading, RanksReadTheEpochExactlyOnceMinusTheTail) {
  const auto shape = wt::testing::small_shape();
  const auto dir = shared_dataset("dist-epoch", shape);
  const auto dataset = data::Dataset::open(dir);  // 23 samples
  const int W = test_world().size(), r = test_world().rank();
  const int64_t B = 2;
  data::DistributedSampler sampler(dataset.layout(), {W, r, B, 5, true, false});
  const int64_t batches = sampler.batches_per_epoch();
  EXPECT_EQ(batches, 23 / (W * B));
  data::Loader loader(dataset, sampler, {2, at::kFloat});
  std::vector<int64_t> mine;
  for (int64_t k = 0; k < batches; ++k) {
    const auto batch = loader.next();
    mine.insert(mine.end(), batch.indices.begin(), batch.indices.end());
    // The data are those of the indices.
    for (size_t j = 0; j < batch.indices.size(); ++j) {
      const int64_t i = batch.indices[j];
      const int64_t seed = i < 9 ? 0 : 100, row = i < 9 ? i : i - 9;
      EXPECT_TRUE(torch::equal(batch.latents[j], wt::testing::expected_latents(shape, seed, row)));
    }
  }
  auto all = torch::empty({W, static_cast<int64_t>(mine.size())}, torch::kLong);
  test_comm().all_gather(all, torch::tensor(mine, torch::kLong));
  std::vector<int64_t> every(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
  const std::set<int64_t> distinct(every.begin(), every.end());
  EXPECT_EQ(distinct.size(), every.size()) << "a sample was read by two ranks";
  EXPECT_EQ(static_cast<int64_t>(every.size()), batches * W * B);
  EXPECT_EQ(23 - static_cast<int64_t>(every.size()), 23 % (W * B)) << "only the tail is dropped";
}

TEST(DistributedLoading, GlobalBatchEqualsOneRankWithTheWholeGlobalBatch) {
  const auto shape = wt::testing::small_shape();
  const auto dir = shared_dataset("dist-global", shape);
  const auto dataset = data::Dataset::open(dir);
  const int W = test_world().size(), r = test_world().rank();
  const int64_t B = 2;
  data::Loader here(dataset, data::DistributedSampler(dataset.layout(), {W, r, B, 11, true, false}));
  data::Loader alone(dataset, data::DistributedSampler(dataset.layout(), {1, 0, B * W, 11, true, false}));
  for (int k = 0; k < 3; ++k) {
    const auto batch = here.next();
    auto all = torch::empty({W, B}, torch::kLong);  // [ranks, B]
    test_comm().all_gather(all, torch::tensor(batch.indices, torch::kLong));
    auto global = std::get<0>(all.flatten().sort());
    auto single = std::get<0>(torch::tensor(alone.next().indices, torch::kLong).sort());
    EXPECT_TRUE(torch::equal(global, single)) << "global batch " << k;
  }
}
