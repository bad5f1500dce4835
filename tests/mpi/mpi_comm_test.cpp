// MpiComm on 2 ranks: every collective, dtype and reduction, with expected
// values derived from the rank and the world size.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "wantrain/distributed/mpi_comm.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::distributed::ReduceOp;

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong};
constexpr int64_t kCount = 1031;  // not a power of two, nor a multiple of the chunk sizes tested below

// Rank r holds (r + 1) * (i % 7 + 1): small integers, exact in every dtype.
torch::Tensor base(int64_t n) { return torch::arange(n, torch::kLong).remainder(7).add(1); }
torch::Tensor input_of(int rank, at::ScalarType dtype, int64_t n = kCount) { return (base(n) * (rank + 1)).to(dtype); }

torch::Tensor reduced(wt::distributed::ReduceOp op, int world, int64_t n = kCount) {
  const auto b = base(n).to(torch::kDouble);
  switch (op) {
    case wt::distributed::ReduceOp::Sum: return b * (world * (world + 1) / 2.0);  // sum of (r + 1) over ranks
    case wt::distributed::ReduceOp::Avg: return b * ((world + 1) / 2.0);
    case wt::distributed::ReduceOp::Max: return b * world;
    case wt::distributed::ReduceOp::Min: return b;
  }
  return b;
}

// Exact, except that an average of bf16/fp16 may round once more.
void expect_matches(const torch::Tensor& got, const torch::Tensor& want, at::ScalarType dtype) {
  const double rtol = dtype == at::kBFloat16 ? 1.0 / 128 : dtype == at::kHalf ? 1.0 / 1024 : 0.0;
  EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), want, rtol, 0))
      << "max abs diff " << (got.to(torch::kDouble) - want).abs().max().item<double>();
}

std::string name_of(at::ScalarType t) { return c10::toString(t); }

const auto kDtypesAndOps = ::testing::Combine(
    ::testing::ValuesIn(kDtypes), ::testing::Values(wt::distributed::ReduceOp::Sum, wt::distributed::ReduceOp::Avg,
                                                    wt::distributed::ReduceOp::Max, wt::distributed::ReduceOp::Min));
std::string dtype_and_op_name(
    const ::testing::TestParamInfo<std::tuple<at::ScalarType, wt::distributed::ReduceOp>>& info) {
  return name_of(std::get<0>(info.param)) + "_" + wt::distributed::to_string(std::get<1>(info.param));
}

class AllReduce : public ::testing::TestWithParam<std::tuple<at::ScalarType, wt::distributed::ReduceOp>> {};

TEST_P(AllReduce, EveryRankEndsWithTheReductionOverRanks) {
  const auto [dtype, op] = GetParam();
  if (op == wt::distributed::ReduceOp::Avg && !at::isFloatingType(dtype)) GTEST_SKIP() << "avg is for floating dtypes";
  auto t = input_of(comm().rank(), dtype);
  comm().all_reduce(t, {op});
  EXPECT_EQ(t.scalar_type(), dtype);
  expect_matches(t, reduced(op, comm().size()), dtype);
}

// The path the Reducer's buckets take during backward (non-blocking MPI,
// waited for without holding a core): the same results.
TEST_P(AllReduce, OverlappingComputeGivesTheSameReduction) {
  const auto [dtype, op] = GetParam();
  if (op == wt::distributed::ReduceOp::Avg && !at::isFloatingType(dtype)) GTEST_SKIP() << "avg is for floating dtypes";
  auto t = input_of(comm().rank(), dtype);
  auto work = comm().all_reduce_async(t, {op, /*overlaps_compute=*/true});
  work->wait();
  expect_matches(t, reduced(op, comm().size()), dtype);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndOps, AllReduce, kDtypesAndOps, dtype_and_op_name);

class ReduceScatter : public ::testing::TestWithParam<std::tuple<at::ScalarType, wt::distributed::ReduceOp>> {};

TEST_P(ReduceScatter, RankRGetsTheReductionOfChunkR) {
  const auto [dtype, op] = GetParam();
  if (op == wt::distributed::ReduceOp::Avg && !at::isFloatingType(dtype)) GTEST_SKIP() << "avg is for floating dtypes";
  const int n = comm().size();
  const auto input = input_of(comm().rank(), dtype, kCount * n);  // [n * kCount]
  auto output = torch::empty({kCount}, dtype);
  comm().reduce_scatter(output, input, {op});
  const auto want = reduced(op, n, kCount * n).slice(0, comm().rank() * kCount, (comm().rank() + 1) * kCount);
  expect_matches(output, want, dtype);
}

// The Reducer's sharded buckets take the non-blocking path during backward.
TEST_P(ReduceScatter, OverlappingComputeGivesTheSameReduction) {
  const auto [dtype, op] = GetParam();
  if (op == wt::distributed::ReduceOp::Avg && !at::isFloatingType(dtype)) GTEST_SKIP() << "avg is for floating dtypes";
  const int n = comm().size();
  const auto input = input_of(comm().rank(), dtype, kCount * n);  // [n * kCount]
  auto output = torch::empty({kCount}, dtype);
  comm().reduce_scatter_async(output, input, {op, /*overlaps_compute=*/true})->wait();
  const auto want = reduced(op, n, kCount * n).slice(0, comm().rank() * kCount, (comm().rank() + 1) * kCount);
  expect_matches(output, want, dtype);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndOps, ReduceScatter, kDtypesAndOps, dtype_and_op_name);

class PerDtype : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(PerDtype, BroadcastFromEveryRootGivesEveryRankTheRootsTensor) {
  for (int root = 0; root < comm().size(); ++root) {
    auto t = comm().rank() == root ? input_of(root, GetParam()) : torch::zeros({kCount}, GetParam());
    comm().broadcast(t, {root});
    expect_matches(t, input_of(root, GetParam()).to(torch::kDouble), GetParam());
  }
}

TEST_P(PerDtype, AllGatherPutsEachRanksInputInItsRow) {
  const int n = comm().size();
  const auto input = input_of(comm().rank(), GetParam(), 5);
  auto output = torch::empty({n, 5}, GetParam());  // [ranks, 5]
  comm().all_gather(output, input);
  for (int r = 0; r < n; ++r) expect_matches(output[r], input_of(r, GetParam(), 5).to(torch::kDouble), GetParam());
}

// Chunk j of rank r's input lands in chunk r of rank j's output: with rank
// r's chunk j filled with 100 r + j, rank j's chunk r holds 100 r + j.
TEST_P(PerDtype, AllToAllSendsChunkJToRankJ) {
  const int n = comm().size(), me = comm().rank();
  constexpr int64_t kChunk = 7;
  const auto marks = [&](int from, int to) { return double(100 * from + to); };
  auto input = torch::empty({n, kChunk}, GetParam());  // [ranks, chunk]
  for (int j = 0; j < n; ++j) input[j].fill_(marks(me, j));
  auto output = torch::empty({n, kChunk}, GetParam());
  comm().all_to_all(output, input);
  for (int r = 0; r < n; ++r)
    expect_matches(output[r], torch::full({kChunk}, marks(r, me), torch::kDouble), GetParam());
}

// ZeRO's parameter all-gather: each rank's input is its own row of the output.
TEST_P(PerDtype, AllGatherInPlaceFillsTheOtherRows) {
  const int n = comm().size();
  auto output = torch::zeros({n, 5}, GetParam());  // [ranks, 5]
  output[comm().rank()].copy_(input_of(comm().rank(), GetParam(), 5));
  comm().all_gather(output, output[comm().rank()]);
  for (int r = 0; r < n; ++r) expect_matches(output[r], input_of(r, GetParam(), 5).to(torch::kDouble), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PerDtype, ::testing::ValuesIn(kDtypes),
                         [](const auto& info) { return name_of(info.param); });

TEST(MpiComm, HalfPrecisionSumsRoundOnceFromFp32) {
  // Every rank can build every rank's random input, so the expected sum is
  // LibTorch's own addition in that dtype, in rank order.
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    auto make = [&](int r) {
      torch::manual_seed(100 + r);
      return (torch::randn({4096}) * (r + 1)).to(dtype);
    };
    auto t = make(comm().rank());
    comm().all_reduce(t);
    auto want = make(0);
    for (int r = 1; r < comm().size(); ++r) want = want + make(r);
    if (comm().size() == 2)
      EXPECT_TRUE(torch::equal(t, want)) << c10::toString(dtype);  // one rounding, the same as LibTorch's
    else
      EXPECT_TRUE(torch::allclose(t.to(torch::kFloat), want.to(torch::kFloat), 1e-2, 1e-2));
  }
}

TEST(MpiComm, AsyncOpsCompleteAndKeepTheirResults) {
  const int n = comm().size();
  std::vector<torch::Tensor> tensors;
  std::vector<wt::distributed::WorkPtr> works;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back(torch::full({1000 * (i + 1)}, static_cast<float>(comm().rank() + i)));
    works.push_back(comm().all_reduce_async(tensors.back()));
  }
  auto gathered = torch::empty({n, 3}, torch::kLong);
  works.push_back(comm().all_gather_async(gathered, torch::full({3}, comm().rank(), torch::kLong)));
  works.push_back(comm().barrier_async());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();  // any wait order is fine
  for (const auto& w : works) EXPECT_TRUE(w->completed());
  for (int i = 0; i < 8; ++i) {
    // sum over r of (r + i) = n(n-1)/2 + n*i
    const float want = n * (n - 1) / 2.0f + n * i;
    EXPECT_TRUE(torch::all(tensors[i] == want).item<bool>()) << "op " << i;
  }
  for (int r = 0; r < n; ++r) EXPECT_TRUE(torch::all(gathered[r] == r).item<bool>());
}

TEST(MpiComm, MessagesLargerThanTheChunkCapAreSentInPieces) {
  // A 100-byte cap splits these into 11 (float32) and 21 (bf16) MPI calls.
  wt::distributed::MpiComm small(test_world(), wt::distributed::CommOptions{std::chrono::seconds(60)},
                                 /*max_chunk_bytes=*/100);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto t = input_of(small.rank(), dtype);
    small.all_reduce(t);
    expect_matches(t, reduced(wt::distributed::ReduceOp::Sum, small.size()), dtype);
    const int root = small.size() - 1;
    auto b = small.rank() == root ? input_of(root, dtype) : torch::zeros({kCount}, dtype);
    small.broadcast(b, {root});
    expect_matches(b, input_of(root, dtype).to(torch::kDouble), dtype);
  }
}

// Groups of consecutive ranks, as sequence parallelism forms them: each
// group's collectives see only its ranks, in the parent's order; one color
// for all is the whole world again.
TEST(MpiComm, SplitFormsGroupsThatReduceAmongThemselves) {
  const int n = comm().size(), me = comm().rank();
  for (const int group_size : {1, n}) {
    auto group = comm().split(me / group_size);
    ASSERT_EQ(group->size(), group_size);
    EXPECT_EQ(group->rank(), me % group_size);
    auto t = torch::full({3}, double(me + 1), torch::kDouble);
    group->all_reduce(t);
    const int first = me / group_size * group_size;  // ranks first .. first + group_size - 1
    const double want = group_size * (first + 1) + group_size * (group_size - 1) / 2.0;
    EXPECT_TRUE(torch::equal(t, torch::full({3}, want, torch::kDouble))) << "group size " << group_size;
  }
  comm().barrier();  // the parent still works
  EXPECT_THROW(comm().split(-1), wt::Error);
}

TEST(MpiComm, EmptyTensorsAndBarrierComplete) {
  auto empty = torch::empty({0});
  comm().all_reduce(empty);
  comm().broadcast(empty);
  comm().barrier();
  EXPECT_EQ(empty.numel(), 0);
}

TEST(MpiComm, RejectsBadArgumentsBeforeIssuingAnything) {
  // Checked on the calling rank before any message: no rank is left waiting.
  EXPECT_THROW(comm().all_reduce(torch::ones({4}, torch::kInt), {wt::distributed::ReduceOp::Avg}), wt::Error);
  EXPECT_THROW(comm().all_reduce(torch::ones({4, 4}).t()), wt::Error);  // not contiguous
  EXPECT_THROW(comm().all_reduce(torch::ones({4}, torch::kBool)), wt::Error);
  EXPECT_THROW(comm().broadcast(torch::ones({4}), {comm().size()}), wt::Error);
  EXPECT_THROW(comm().all_gather(torch::empty({3}), torch::ones({4})), wt::Error);
  EXPECT_THROW(comm().reduce_scatter(torch::empty({4}), torch::ones({3})), wt::Error);
  EXPECT_THROW(comm().all_to_all(torch::empty({4}), torch::ones({6})), wt::Error);  // sizes differ
  const auto shared = torch::ones({4});
  EXPECT_THROW(comm().all_to_all(shared, shared), wt::Error);  // in place
  try {
    comm().all_reduce(torch::ones({2}, torch::kLong), {wt::distributed::ReduceOp::Avg});
    FAIL() << "avg on int64 was accepted";
  } catch (const wt::Error& e) {
    EXPECT_STREQ(e.what(), "MpiComm all_reduce: avg is defined for floating dtypes, not Long");
  }
  comm().barrier();  // the ranks are still in step
}

}  // namespace
