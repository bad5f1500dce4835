// Exact softmax attention over query chunks, with a backward that
// recomputes each chunk's scores: memory O(B·heads·chunk·S) in forward and
// backward instead of the O(B·heads·L·S) score matrix that autograd would
// keep per block. This is FlashAttention's recomputation at the granularity
// LibTorch's matrix products offer: forward keeps only each query row's
// log-sum-exp (fp32) and the output; backward forms each chunk's
// probabilities again from them.
//
// The arithmetic is that of Wan's attention: scores q kᵀ / sqrt(d) in the products'
// dtype (autocast's when it is on, else the inputs'), softmax in fp32, the
// probabilities rounded to that dtype for the product with v.
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::nn {

// q [B, heads, L, d], k and v [B, heads, S, d] -> [B, heads, L, d], in the
// products' dtype. chunk >= 1 query rows at a time.
at::Tensor chunked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t chunk);

}  // namespace wt::nn
