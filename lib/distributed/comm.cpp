#include "wantrain/distributed/comm.hpp"

namespace wt::distributed {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "unknown";
}

}  // namespace wt::distributed
