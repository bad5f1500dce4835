// The autocast adapter: only the device a scope names changes, and every
// scope leaves the thread's autocast state as it found it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "wantrain/nn/autocast.hpp"

namespace {

using wt::nn::autocast_dtype;
using wt::nn::AutocastScope;
using wt::nn::Fp32Scope;

// The adapter's own queries: this test compiles against every LibTorch the
// adapter does.
c10::ScalarType cpu() { return autocast_dtype(at::kCPU); }
c10::ScalarType cuda() { return autocast_dtype(at::kCUDA); }

TEST(Autocast, ACpuScopeNeverSwitchesCudaAutocastOn) {
  ASSERT_EQ(cpu(), at::kFloat);
  {
    AutocastScope scope(at::kBFloat16, at::kCPU);
    EXPECT_EQ(cpu(), at::kBFloat16);
    // The CUDA state is untouched: a CPU run's scope turns nothing on there.
    EXPECT_EQ(cuda(), at::kFloat);
    // Matrix products follow it; what Fp32Scope guards stays fp32.
    const auto a = torch::randn({4, 4});
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
    {
      Fp32Scope fp32;
      EXPECT_EQ(cpu(), at::kFloat);
      EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
      EXPECT_EQ(cuda(), at::kFloat);
    }
    EXPECT_EQ(cpu(), at::kBFloat16);
  }
  EXPECT_EQ(cpu(), at::kFloat);
}

TEST(Autocast, ACudaScopeLeavesCpuAutocastAloneAndRestoresItsOwnState) {
  // Setting CUDA's autocast state needs no device: it is a thread-local flag.
  {
    AutocastScope scope(at::kHalf, at::kCUDA);
    EXPECT_EQ(cuda(), at::kHalf);
    EXPECT_EQ(cpu(), at::kFloat);  // CPU tensors compute as they are
    EXPECT_EQ(autocast_dtype(torch::zeros({1})), at::kFloat);
    {
      Fp32Scope fp32;
      EXPECT_EQ(cuda(), at::kFloat);
    }
    EXPECT_EQ(cuda(), at::kHalf);
  }
  EXPECT_EQ(cuda(), at::kFloat);
}

TEST(Autocast, NestedScopesRestoreTheOuterDtypeAndAnFp32ScopeTurnsOff) {
  {
    AutocastScope outer(at::kBFloat16, at::kCPU);
    {
      AutocastScope off(at::kFloat, at::kCPU);
      EXPECT_EQ(cpu(), at::kFloat);
    }
    EXPECT_EQ(cpu(), at::kBFloat16);
  }
  EXPECT_EQ(cpu(), at::kFloat);
}

}  // namespace
