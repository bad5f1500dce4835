#include "wantrain/distributed/mpi_half_ops.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>

#include "wantrain/util/error.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt::distributed {

namespace {

struct Add {
  float operator()(float a, float b) const { return a + b; }
};
// NaN wins, as in LibTorch's maximum/minimum.
struct Max {
  float operator()(float a, float b) const { return std::isnan(a) || a > b ? a : b; }
};
struct Min {
  float operator()(float a, float b) const { return std::isnan(a) || a < b ? a : b; }
};

template <class Half, class Combine>
void combine(void* in, void* inout, int* length, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  const Combine f;
  for (int i = 0; i < *length; ++i) b[i] = Half(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

template <class Half>
MPI_User_function* pick(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return &combine<Half, Add>;
    case ReduceOp::Max: return &combine<Half, Max>;
    case ReduceOp::Min: return &combine<Half, Min>;
  }
  throw Error("unknown ReduceOp");
}

int dtype_slot(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return 0;
  if (dtype == at::kHalf) return 1;
  throw Error(std::string("half-precision MPI reduction asked for ") + c10::toString(dtype));
}

int op_slot(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return 0;
    case ReduceOp::Max: return 1;
    case ReduceOp::Min: return 2;
  }
  throw Error("unknown ReduceOp");
}

constexpr ReduceOp kSlotOps[3] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

}  // namespace

MPI_User_function* half_reduce_function(at::ScalarType dtype, ReduceOp op) {
  return dtype_slot(dtype) == 0 ? pick<c10::BFloat16>(op) : pick<c10::Half>(op);
}

HalfReduceOps::HalfReduceOps() {
  const at::ScalarType dtypes[2] = {at::kBFloat16, at::kHalf};
  for (int d = 0; d < 2; ++d)
    for (int o = 0; o < 3; ++o)
      MPI_CHECK(MPI_Op_create(half_reduce_function(dtypes[d], kSlotOps[o]), /*commute=*/1, &ops_[d][o]));
}

HalfReduceOps::~HalfReduceOps() {
  for (auto& row : ops_)
    for (auto& op : row) MPI_Op_free(&op);
}

MPI_Op HalfReduceOps::get(at::ScalarType dtype, ReduceOp op) const { return ops_[dtype_slot(dtype)][op_slot(op)]; }

}  // namespace wt::distributed
