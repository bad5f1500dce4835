// Attention, two ways. fused_attention: LibTorch's scaled_dot_product_attention
// (FlashAttention's kernel on CPU; flash or memory-efficient on CUDA),
// whose forward keeps only the output and each row's log-sum-exp: the
// default. chunked_attention, below: the same recomputation by hand, for
// what the fused kernel does not serve and for `--attention-chunk`.
//
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
// products' dtype (autocast's when it is on, else q's), with the scale
// 1/sqrt(d) applied inside, as Wan's flash_attention(softmax_scale=None)
// does. No mask: Wan attends over its padded text as it is.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The kernel scaled_dot_product_attention picks for these inputs
// (sdp::SDPBackend: 1 flash, 2 efficient, 0 the unfused math): tests
// check that the model's shapes stay on a fused kernel.
int64_t fused_attention_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// q [B, heads, L, d], k and v [B, heads, S, d] -> [B, heads, L, d], in the
// products' dtype. chunk >= 1 query rows at a time.
at::Tensor chunked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t chunk);

}  // namespace wt::nn
