// Starting noise from a file (wansample --noise): an HDF5 /noise of
// [C, F, H, W] latents, float32 or float64, so that a sample can be
// reproduced step for step by another implementation from the same start.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::data {

// [C, F, H, W] fp32. UsageError naming the file when it is not HDF5, lacks
// /noise, has another shape than `expected`, or holds a non-finite value.
at::Tensor read_noise(const std::string& path, const std::vector<int64_t>& expected);

}  // namespace wt::data
