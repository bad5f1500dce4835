// Frozen Linear weights held in float8_e4m3fn (a LoRA run's base under
// --base-precision fp8): one byte a weight plus one fp32 scale for each
// block of kFp8Block consecutive inputs of an output row, so that a row's
// small weights keep their precision beside its large ones.
//
//   scale[o, b]  = max |w[o, 64b .. 64b+63]| / 448     (1 for a block of zeros)
//   values[o, i] = e4m3(w[o, i] / scale[o, i / 64])    (round to nearest even;
//                                                       |w / scale| <= 448 by construction)
//   dequantised  = round_to(dtype)(float(values) * scale)
//
// 448 is e4m3fn's largest finite value. e4m3 keeps 3 mantissa bits, so a
// quantised weight is within 2^-4 of its value relatively, or 2^-10 * scale
// absolutely below e4m3's smallest normal (2^-6 * scale): the bound
// tests/unit/wan/model/fp8_weights_test.cpp derives for a Linear's output.
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::nn {

constexpr int64_t kFp8Block = 64;
constexpr double kFp8Max = 448.0;

// [out, ceil(in / kFp8Block)]: the shape of the scales of a weight [out, in].
std::vector<int64_t> fp8_scale_shape(int64_t out, int64_t in);

// Quantises `weight` [out, in] (any floating dtype, any device) into
// `values` (float8_e4m3fn, its shape) and `scales` (fp32, fp8_scale_shape),
// which must exist on one device; a row block at a time in fp32, so that a
// layer's fp32 copy never exists whole.
void quantize_fp8(const at::Tensor& weight, const at::Tensor& values, const at::Tensor& scales);

// The weight `values` and `scales` hold, rounded once to `dtype`.
at::Tensor dequantize_fp8(const at::Tensor& values, const at::Tensor& scales, at::ScalarType dtype);

// y = x W^T + b with W = dequantize_fp8(values, scales, dtype), x and b in
// `dtype`. Differentiable in x only (the weight is frozen); backward
// dequantises W again instead of keeping it, so that a bf16 copy of a layer
// lives only while its product runs.
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& values, const at::Tensor& scales, const at::Tensor& bias,
                      at::ScalarType dtype);

}  // namespace wt::nn
