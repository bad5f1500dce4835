// The MPI reduction functions for bf16/fp16 against LibTorch's own arithmetic.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "wantrain/distributed/mpi_half_ops.hpp"

namespace {

// Applies the MPI user function as MPI would: inout = in (op) inout.
torch::Tensor reduce_with_mpi_function(at::ScalarType dtype, wt::distributed::ReduceOp op, torch::Tensor in,
                                       torch::Tensor inout) {
  int length = static_cast<int>(in.numel());
  MPI_Datatype type = MPI_UINT16_T;
  wt::distributed::half_reduce_function(dtype, op)(in.data_ptr(), inout.data_ptr(), &length, &type);
  return inout;
}

class HalfReduce : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(HalfReduce, SumEqualsLibTorchAdditionInThatDtype) {
  torch::manual_seed(1);
  const auto a = torch::randn({4099}).to(GetParam());
  const auto b = torch::randn({4099}).to(GetParam()) * 300;
  const auto expected = a + b;  // LibTorch: widen to fp32, add, round once
  const auto got = reduce_with_mpi_function(GetParam(), wt::distributed::ReduceOp::Sum, a.clone(), b.clone());
  EXPECT_TRUE(torch::equal(got, expected));
}

// The vectorised sums round as LibTorch does at the edges too: ties,
// subnormals, overflow to infinity, infinities and NaN, at every position of
// a vector (lengths around the 8- and 16-lane blocks).
TEST_P(HalfReduce, SumEqualsLibTorchAtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const auto info = GetParam() == at::kBFloat16 ? std::make_pair(0x1p-133f, 0x1.fep127f)  // subnormal, max
                                                : std::make_pair(0x1p-24f, 65504.0f);
  const std::vector<float> edge = {0.0f,         -0.0f, info.first,     -info.first, 3 * info.first, info.second,
                                   -info.second, 1.0f,  1.0f + 0x1p-9f, inf,         -inf,           nan,
                                   0x1p-8f,      1e-3f, -2.5f,          7.0f};
  for (int length : {1, 7, 8, 9, 15, 16, 17, 33}) {
    std::vector<float> x, y;
    for (int i = 0; i < length; ++i) {
      x.push_back(edge[size_t(i) % edge.size()]);
      y.push_back(edge[size_t(i * 7 + 3) % edge.size()]);
    }
    const auto a = torch::tensor(x).to(GetParam()), b = torch::tensor(y).to(GetParam());
    const auto got = reduce_with_mpi_function(GetParam(), wt::distributed::ReduceOp::Sum, a.clone(), b.clone());
    // Bit for bit against c10's scalar arithmetic (widen, add, round once),
    // so -0 against +0 counts; a NaN must stay a NaN (F16C keeps its payload).
    const auto got_bits = got.view(at::kShort), a_f = a.to(torch::kFloat), b_f = b.to(torch::kFloat);
    for (int i = 0; i < length; ++i) {
      const float sum = a_f[i].item<float>() + b_f[i].item<float>();
      const uint16_t want = GetParam() == at::kBFloat16 ? c10::BFloat16(sum).x : c10::Half(sum).x;
      const uint16_t have = uint16_t(got_bits[i].item<int16_t>());
      if (std::isnan(sum))
        EXPECT_TRUE(std::isnan(got[i].item<float>())) << "length " << length << ", element " << i;
      else
        EXPECT_EQ(have, want) << "length " << length << ", element " << i << ": " << x[size_t(i)] << " + "
                              << y[size_t(i)];
    }
  }
}

TEST_P(HalfReduce, MaxAndMinEqualLibTorchIncludingNaN) {
  torch::manual_seed(2);
  auto a = torch::randn({1000}).to(GetParam());
  auto b = torch::randn({1000}).to(GetParam());
  a[3] = std::numeric_limits<float>::quiet_NaN();
  b[7] = std::numeric_limits<float>::quiet_NaN();
  const auto max = reduce_with_mpi_function(GetParam(), wt::distributed::ReduceOp::Max, a.clone(), b.clone());
  const auto min = reduce_with_mpi_function(GetParam(), wt::distributed::ReduceOp::Min, a.clone(), b.clone());
  EXPECT_TRUE(torch::allclose(max, torch::maximum(a, b), 0, 0, /*equal_nan=*/true));
  EXPECT_TRUE(torch::allclose(min, torch::minimum(a, b), 0, 0, /*equal_nan=*/true));
  EXPECT_TRUE(std::isnan(max[3].item<float>()) && std::isnan(min[7].item<float>()));
}

TEST_P(HalfReduce, AvgUsesTheSumFunction) {
  EXPECT_EQ(wt::distributed::half_reduce_function(GetParam(), wt::distributed::ReduceOp::Avg),
            wt::distributed::half_reduce_function(GetParam(), wt::distributed::ReduceOp::Sum));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfReduce, ::testing::Values(at::kBFloat16, at::kHalf),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
