// The HDF5 reads and writes the checkpoint files share (lib/ckpt only).
// Callers hold io::library_mutex().
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "wantrain/io/h5.hpp"

namespace wt::ckpt {

// One float32 tensor as a dataset of its shape (a scalar dataspace for 0-d).
void write_tensor(hid_t location, const std::string& name, const at::Tensor& tensor);
// A float32 tensor of the dataset's shape (any stored float type is converted by HDF5).
at::Tensor read_tensor(hid_t location, const std::string& name);

io::Handle create_group(hid_t location, const std::string& name);
io::Handle open_group(hid_t location, const std::string& name);

// The names of the links directly under a group, and of an object's
// attributes, in HDF5's (name) order.
std::vector<std::string> members(hid_t group);
std::vector<std::string> attribute_names(hid_t object);

}  // namespace wt::ckpt
