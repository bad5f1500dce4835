// The HDF5 reads and writes the checkpoint files share (lib/ckpt only).
// Callers hold io::library_mutex(), except around write_file.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "wantrain/io/h5.hpp"

namespace wt::ckpt {

// Creates `path` (truncating) and runs write(file, between_tensors) under
// the HDF5 lock, which between_tensors() lets go of for a moment (call it
// before each tensor: the Loader's reads interleave); then flushes and
// closes the file. On any failure the half-written file is discarded and
// Error "<what> <path>: cannot write: <reason>" thrown. Takes the lock itself.
void write_file(const std::string& path, const std::string& what,
                const std::function<void(hid_t file, const std::function<void()>& between_tensors)>& write);

// One float32 tensor as a dataset of its shape (a scalar dataspace for 0-d).
void write_tensor(hid_t location, const std::string& name, const at::Tensor& tensor);
// A float32 tensor of the dataset's shape (any stored float type is converted by HDF5).
at::Tensor read_tensor(hid_t location, const std::string& name);

// Elements [begin, end) of a float dataset flattened (row-major), read as
// the rows of its leading dimension that hold them: float32 [rows * row
// size], starting at element `first` (<= begin) of the flattened dataset.
at::Tensor read_rows_covering(hid_t location, const std::string& name, int64_t begin, int64_t end, int64_t& first);

io::Handle create_group(hid_t location, const std::string& name);

// The names of the links directly under a group, and of an object's
// attributes, in HDF5's (name) order.
std::vector<std::string> members(hid_t group);
std::vector<std::string> attribute_names(hid_t object);

}  // namespace wt::ckpt
