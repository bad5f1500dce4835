#include "wantrain/app/float_dtype.hpp"

#include <fmt/format.h>

#include "wantrain/util/error.hpp"

namespace wt::app {

at::ScalarType float_dtype(const std::string& name) {
  if (name == "fp32") return at::kFloat;
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  if (name == "fp8") return at::kFloat8_e4m3fn;
  throw Error(fmt::format("'{}' names no floating-point dtype (fp32, bf16, fp16, fp8)", name));
}

}  // namespace wt::app
