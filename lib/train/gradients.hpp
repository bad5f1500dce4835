// Whole-model gradient arithmetic on the Reducer's flat bucket buffers (every
// reduced gradient is a view into them): after synchronisation they are
// identical on every rank, so the norm, the clip and the finite check are too.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace wt::train {

// Each buffer's L2 norm, accumulated in double, as a [buffers] kFloat64
// tensor on their device: no host read, so it can travel with the step's
// other figures in one copy.
at::Tensor bucket_norms(const std::vector<at::Tensor>& buffers);
// sqrt of the sum of squares of `norms` (bucket_norms, read), in order.
double norm_of(const double* norms, size_t count);
// sqrt(sum of squares) over all buffers (NaN or Inf when any gradient is).
double global_norm(const std::vector<at::Tensor>& buffers);

// Multiplies every buffer by `factor`.
void scale_gradients(const std::vector<at::Tensor>& buffers, double factor);

// Scales the gradients down to `max_norm` when their norm (given) exceeds it,
// as torch.nn.utils.clip_grad_norm_ does; max_norm 0 is off.
void clip_to_norm(const std::vector<at::Tensor>& buffers, double norm, double max_norm);

}  // namespace wt::train
