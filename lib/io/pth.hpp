// .pth files written by torch.save (state dicts of tensors): their index is
// read by the restricted reader of pth_index.hpp, which runs no code from
// the file; tensors are read one at a time, on request, straight from the
// file into a tensor of their own (the file is never held in memory).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "wantrain/io/pth_index.hpp"

namespace wt::io {

at::ScalarType scalar_type(PthDtype dtype);

class PthFile {
 public:
  // Reads and checks the index; reads no tensor data. UsageError naming the
  // file for anything that is not a torch.save'd state dict of tensors.
  static PthFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<PthTensor>& entries() const { return entries_; }  // in the state dict's order
  const PthTensor* find(const std::string& name) const;
  // The tensor as saved (its dtype, its shape), contiguous, on the CPU;
  // Error naming the file and tensor when the read fails.
  at::Tensor read(const PthTensor& entry) const;

 private:
  std::string path_;
  std::vector<PthTensor> entries_;
};

}  // namespace wt::io
