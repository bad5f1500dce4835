// Reductions on bfloat16 and float16 for MPI, which has no 16-bit float types.
//
// Such tensors travel as MPI_UINT16_T and are combined by user-defined ops
// that widen each pair of elements to fp32, combine, and round once back
// (round-to-nearest-even), exactly as LibTorch's CPU kernels do: a 2-rank sum
// equals `a + b` computed by LibTorch in that dtype.
#pragma once

#include <c10/core/ScalarType.h>
#include <mpi.h>

#include "wantrain/distributed/comm.hpp"

namespace wt::distributed {

// The MPI user function for `op` (Avg: the sum) on bf16 or fp16.
MPI_User_function* half_reduce_function(at::ScalarType dtype, ReduceOp op);

// Owns the MPI_Op handles built from half_reduce_function. Create after
// MPI_Init, destroy before MPI_Finalize.
class HalfReduceOps {
 public:
  HalfReduceOps();
  ~HalfReduceOps();
  HalfReduceOps(const HalfReduceOps&) = delete;
  HalfReduceOps& operator=(const HalfReduceOps&) = delete;

  MPI_Op get(at::ScalarType dtype, ReduceOp op) const;

 private:
  // [dtype: bf16, fp16][op: sum, max, min]
  MPI_Op ops_[2][3];
};

}  // namespace wt::distributed
