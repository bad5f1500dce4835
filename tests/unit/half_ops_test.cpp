// The MPI reduction functions for bf16/fp16 against LibTorch's own arithmetic.
#include <gtest/gtest.h>
#include <torch/torch.h>

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
