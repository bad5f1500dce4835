#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt {

// Time spent in each LibTorch operator, from LibTorch's autograd profiler.
// Self time excludes the operators an operator called (matmul's self time
// leaves out the mm it dispatched to); backward nodes count as operators too.
struct OpTime {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0, total_ms = 0;
  double gflop = 0;  // for matrix products (LibTorch counts mm, addmm, bmm, conv): floating-point operations
};

// Records every operator the calling thread (and autograd, for its
// backward) runs between construction and stop(); one profile at a time.
class OpProfile {
 public:
  OpProfile();
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Operators by self time, largest first.
  std::vector<OpTime> stop();

 private:
  bool running_ = false;
};

// The `top` largest rows as a table, with each one's share of all self time.
std::string format_op_times(const std::vector<OpTime>& ops, size_t top, int64_t steps);

}  // namespace wt
