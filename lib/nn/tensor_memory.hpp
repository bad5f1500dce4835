// The bytes LibTorch's CPU tensors hold, counted at the allocator: what the
// memory plan predicts (the CPU's torch.cuda.max_memory_allocated), apart
// from the memory malloc keeps after tensors are freed, which peak RSS adds.
#pragma once

#include <cstdint>

namespace wt::nn {

// Installs the counting allocator in front of LibTorch's CPU allocator (once
// per process; tensors allocated before are not counted).
void count_tensor_memory();

// Bytes of CPU tensors alive now, and the most alive at once since the last
// reset_peak_tensor_bytes() (or since count_tensor_memory()).
int64_t live_tensor_bytes();
int64_t peak_tensor_bytes();
void reset_peak_tensor_bytes();

}  // namespace wt::nn
