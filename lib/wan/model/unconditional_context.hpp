// The unconditional context: all zeros, a prompt of zero tokens, since Wan
// zero-pads every context beyond its tokens to text_len. Caption dropout
// (--text-drop, wan/objective/caption_dropout.hpp) trains with it and every
// sampler's unconditional branch uses it, so they agree.
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::wan {

// Zeros shaped like `context`.
at::Tensor unconditional_context(const at::Tensor& context);

}  // namespace wt::wan
