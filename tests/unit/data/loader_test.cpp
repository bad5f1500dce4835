// Loader: delivers the sampler's batches with the right data, converted;
// reports an unreadable shard by name; shuts down while reading ahead.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "../../common/shards.hpp"
#include "wantrain/data/loader.hpp"
#include "wantrain/util/error.hpp"

using namespace wt;
namespace fs = std::filesystem;

namespace {
struct Fixture {
  std::string dir;
  data::SampleShape shape = wt::testing::small_shape(data::Stored::Float16, data::Stored::Float16);
  explicit Fixture(const std::string& name) : dir(wt::testing::fresh_directory(name)) {
    wt::testing::write_shard(dir + "/a.h5", shape, 5, 100);
    wt::testing::write_shard(dir + "/b.h5", shape, 6, 200);
  }
  // (seed, row) of global sample i
  std::pair<int64_t, int64_t> source(int64_t i) const {
    return i < 5 ? std::make_pair(100, i) : std::make_pair(200, i - 5);
  }
};
}  // namespace

TEST(Loader, DeliversTheSamplersBatchesConvertedToTheTrainingDtype) {
  Fixture f("loader-batches");
  auto dataset = data::Dataset::open(f.dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 3, 9, true, false});
  data::DistributedSampler reference = sampler;
  data::Loader loader(dataset, sampler, {2, at::kFloat});
  for (int step = 0; step < 7; ++step) {  // 3 batches per epoch: crosses two epochs
    const auto want = reference.next();
    const data::Batch batch = loader.next();
    ASSERT_EQ(batch.indices, want);
    EXPECT_EQ(batch.latents.scalar_type(), at::kFloat);
    EXPECT_EQ(batch.latents.sizes(), (at::IntArrayRef{3, 4, 2, 3, 5}));
    EXPECT_EQ(batch.text_emb.sizes(), (at::IntArrayRef{3, 6, 8}));
    for (size_t j = 0; j < want.size(); ++j) {
      const auto [seed, row] = f.source(want[j]);
      // float16 on disk, float32 in the batch: exactly the float16 value
      EXPECT_TRUE(torch::equal(batch.latents[j],
                               wt::testing::expected_latents(f.shape, seed, row).to(at::kHalf).to(at::kFloat)));
      EXPECT_TRUE(torch::equal(batch.text_emb[j], wt::testing::expected_text(f.shape, seed, row)));
      EXPECT_EQ(batch.text_len[j].item<int>(), wt::testing::expected_text_len(f.shape, row));
    }
    EXPECT_EQ(loader.state(), reference.state()) << "the position after the delivered batch";
  }
}

TEST(Loader, ResumesFromASavedStateWithTheSameBatches) {
  Fixture f("loader-resume");
  auto dataset = data::Dataset::open(f.dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 2, 1, true, false});
  data::SamplerState saved;
  std::vector<std::vector<int64_t>> after;
  {
    data::Loader loader(dataset, sampler, {3, at::kFloat});
    for (int i = 0; i < 4; ++i) loader.next();
    saved = loader.state();
    for (int i = 0; i < 5; ++i) after.push_back(loader.next().indices);
  }
  sampler.restore(saved);
  data::Loader resumed(dataset, sampler, {1, at::kFloat});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(resumed.next().indices, after[i]) << i;
}

TEST(Loader, UnreadableShardIsReportedInTheCallersThreadByName) {
  Fixture f("loader-error");
  auto dataset = data::Dataset::open(f.dir);
  fs::remove(f.dir + "/b.h5");  // vanishes after the check (a failing network file system, say)
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 11, 0, true, false});  // every sample
  data::Loader loader(dataset, sampler, {1, at::kFloat});
  try {
    loader.next();
    FAIL() << "reading a deleted shard succeeded";
  } catch (const wt::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("data: cannot read sample "), std::string::npos) << message;
    EXPECT_NE(message.find("of shard " + f.dir + "/b.h5"), std::string::npos) << message;
  }
}

TEST(Loader, ShutsDownCleanlyWhileReadingAhead) {
  Fixture f("loader-shutdown");
  auto dataset = data::Dataset::open(f.dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 1, 0, true, false});
  for (int prefetch : {1, 4}) {
    data::Loader loader(dataset, sampler, {prefetch, at::kBFloat16});
    EXPECT_EQ(loader.next().latents.scalar_type(), at::kBFloat16);
  }  // destroyed with a full read-ahead queue: must join, not hang
  SUCCEED();
}

TEST(Loader, LargeSamplesReadAsStoredThenConvertedArriveIntact) {
  // Samples of a few MiB, each batch of 3 read as stored into a staging
  // batch and then converted to fp32, over several batches.
  data::SampleShape s = wt::testing::small_shape(data::Stored::Float16, data::Stored::Float16);
  s.channels = 16;
  s.frames = 4;
  s.height = 64;
  s.width = 64;
  s.text_len = 512;
  s.text_dim = 512;
  const auto dir = wt::testing::fresh_directory("loader-large");
  wt::testing::write_shard(dir + "/a.h5", s, 7, 3);
  auto dataset = data::Dataset::open(dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 3, 2, true, false});
  data::DistributedSampler reference = sampler;
  data::Loader loader(dataset, sampler, {2, at::kFloat});
  for (int step = 0; step < 4; ++step) {
    const auto want = reference.next();
    const auto batch = loader.next();
    ASSERT_EQ(batch.indices, want);
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_TRUE(
          torch::equal(batch.latents[j], wt::testing::expected_latents(s, 3, want[j]).to(at::kHalf).to(at::kFloat)))
          << "sample " << want[j];
      EXPECT_TRUE(
          torch::equal(batch.text_emb[j], wt::testing::expected_text(s, 3, want[j]).to(at::kHalf).to(at::kFloat)));
    }
  }
}

TEST(Loader, FinishAddsTensorsFromTheRecycledBuffersToEachBatchInOrder) {
  Fixture f("loader-finish");
  auto dataset = data::Dataset::open(f.dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 2, 4, true, false});
  data::LoaderOptions options(2, at::kFloat);
  options.finish = [](data::Batch& batch, const data::LoaderOptions::Allocate& allocate) {
    auto first = allocate({int64_t(batch.indices.size())}, at::kLong);  // [B]
    for (size_t j = 0; j < batch.indices.size(); ++j) first[int64_t(j)] = batch.indices[j] * 1000 + batch.number;
    batch.extra["tag"] = first;
  };
  data::Loader loader(dataset, sampler, options);
  std::set<const void*> tag_buffers;
  for (int64_t n = 0; n < 12; ++n) {
    const data::Batch batch = loader.next();
    EXPECT_EQ(batch.number, n);
    const auto tag = batch.extra.at("tag");
    for (size_t j = 0; j < batch.indices.size(); ++j)
      EXPECT_EQ(tag[int64_t(j)].item<int64_t>(), batch.indices[j] * 1000 + n);
    ASSERT_TRUE(batch.copied);
    batch.copied->record(at::kCPU);  // a CPU copy is finished when it returns
    EXPECT_TRUE(batch.copied->done());
    tag_buffers.insert(tag.data_ptr());
  }
  // Batches held by nobody give their buffers back: a few in turn, not 12.
  EXPECT_LE(tag_buffers.size(), size_t(4));
}

TEST(Loader, ABatchStillHeldIsNeverRefilledWhileTheLoaderReadsAhead) {
  Fixture f("loader-held");
  auto dataset = data::Dataset::open(f.dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 3, 2, true, false});
  data::Loader loader(dataset, sampler, {2, at::kFloat});
  const data::Batch held = loader.next();
  const auto micro = held.latents.narrow(0, 1, 2);  // what a micro-batch keeps on the CPU: a view
  const auto latents = held.latents.clone(), text = held.text_emb.clone(), view = micro.clone();
  for (int i = 0; i < 10; ++i) loader.next();  // three epochs' worth of reads into recycled buffers
  EXPECT_TRUE(torch::equal(held.latents, latents));
  EXPECT_TRUE(torch::equal(held.text_emb, text));
  EXPECT_TRUE(torch::equal(micro, view));
}

// A dataset of two shapes: each batch has its bucket's shape and its samples'
// values, and the buffers are reused per shape: their number is bounded by
// the batches in flight (prefetch queued, one being read, one held here),
// each with latents, text and their staging copies, per shape, however
// many batches go by (one list for all shapes would re-allocate whenever
// the shape changes: 4 buffers a batch).
TEST(Loader, BucketedBatchesHaveTheirBucketsShapeAndReuseBuffersPerShape) {
  const auto dir = wt::testing::fresh_directory("loader-buckets");
  const auto small = wt::testing::small_shape(data::Stored::Float16, data::Stored::Float16);
  auto wide = small;
  wide.width = 9;
  wt::testing::write_shard(dir + "/a.h5", small, 8, 100);  // samples 0-7
  wt::testing::write_shard(dir + "/b.h5", wide, 6, 200);   // 8-13
  const auto dataset = data::Dataset::open(dir);
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 2, 5, true, false});  // 7 batches an epoch
  data::DistributedSampler reference = sampler;
  data::Loader loader(dataset, sampler, {2, at::kFloat});
  constexpr int64_t kBound = 2 * (2 + 2) * 4;  // shapes x batches in flight x buffers a batch
  for (int step = 0; step < 7 * 12; ++step) {
    const auto want = reference.next();
    const data::Batch batch = loader.next();
    ASSERT_EQ(batch.indices, want);
    const bool is_wide = want[0] >= 8;
    const auto& shape = is_wide ? wide : small;
    EXPECT_EQ(batch.latents.sizes(), (at::IntArrayRef{2, 4, 2, 3, is_wide ? 9 : 5}));
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(want[j] >= 8, is_wide) << "one bucket per batch";
      const int64_t seed = is_wide ? 200 : 100, row = is_wide ? want[j] - 8 : want[j];
      EXPECT_TRUE(
          torch::equal(batch.latents[j], wt::testing::expected_latents(shape, seed, row).to(at::kHalf).to(at::kFloat)));
    }
    EXPECT_LE(loader.allocations(), kBound) << "step " << step << ": buffers re-allocated";
  }
  EXPECT_GE(loader.allocations(), 4) << "each shape's latents and text at least";
}
