// The floating-point dtypes the tools' options name: "fp32", "bf16", "fp16"
// (--precision, --grad-comm-dtype, export --dtype), "fp8" (e4m3fn: frozen
// weights, --base-precision and wansample's --weights-dtype). The option tables
// restrict the values; this maps them in one place.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace wt::app {

// kFloat, kBFloat16, kHalf or kFloat8_e4m3fn; wt::Error for any other name.
at::ScalarType float_dtype(const std::string& name);

}  // namespace wt::app
