// The restricted reader of torch.save files (.pth: the zip format PyTorch
// writes since 1.6), for state dicts of tensors such as Wan's released VAE
// and umT5 weights.
//
// A .pth is a pickle, and a pickle is a program: unpickled by Python it may
// call anything. This reader runs none of it. It interprets only the opcodes
// a state dict needs (dicts, tuples, strings, numbers, the persistent ids of
// storages) and only three callables, by name: collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 and torch._utils._rebuild_parameter; the
// storage classes (torch.FloatStorage, ...) only as the dtype of a storage.
// Anything else is refused with one line naming the file and what it asked
// for. The zip's entries must be stored (torch.save never compresses);
// ZIP64 archives (files over 4 GiB) are read.
//
// This part reads no tensor data and needs no LibTorch, so that a fuzzer can
// drive it (tests/fuzz): it returns where each tensor's bytes lie.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wt::io {

enum class PthDtype { F32, F64, F16, BF16, I64, I32, I16, I8, U8, Bool };
const char* pth_dtype_name(PthDtype dtype);  // "float32", ...
uint64_t pth_dtype_size(PthDtype dtype);

struct PthTensor {
  std::string name;  // the state dict's key
  PthDtype dtype = PthDtype::F32;
  std::vector<int64_t> shape, stride;  // in elements, as the tensor was saved
  int64_t storage_offset = 0;          // elements from the start of its storage
  uint64_t data_offset = 0;            // of the storage's first byte in the file
  uint64_t storage_bytes = 0;          // the whole storage (several tensors may share it)
  // Bytes from the storage's start that the tensor's elements reach.
  uint64_t extent_bytes() const;
};

// Reads `size` bytes at `offset` of the file (throws if it cannot).
using ByteReader = std::function<std::string(uint64_t offset, uint64_t size)>;

// The tensors of the .pth at `path` (`file_size` bytes, read through `read`),
// in the state dict's order. UsageError naming the file and the problem for
// anything that is not a torch.save'd dict of tensors, or that claims data
// outside the file.
std::vector<PthTensor> read_pth_index(const std::string& path, uint64_t file_size, const ByteReader& read);

}  // namespace wt::io
