#include "wantrain/distributed/sequence_exchange.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/util/error.hpp"

namespace wt::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The Comm travels through the autograd context as an integer: the group
// outlives every graph built with it.
Comm& group_of(AutogradContext* ctx) { return *reinterpret_cast<Comm*>(ctx->saved_data["group"].toInt()); }

// [B, Ls, H, D] -> [B, N·Ls, H/N, D]: chunk j of the send buffer is head
// group j of this rank's tokens; chunk i received is rank i's tokens of
// this rank's heads.
at::Tensor exchange_to_heads(const at::Tensor& x, Comm& group) {
  const int64_t n = group.size(), b = x.size(0), ls = x.size(1), h = x.size(2), d = x.size(3);
  if (h % n != 0) throw Error(fmt::format("sequence_to_heads: {} heads do not split over {} ranks", h, n));
  const auto send = x.reshape({b, ls, n, h / n, d}).permute({2, 0, 1, 3, 4}).contiguous();  // [N, B, Ls, H/N, D]
  auto received = at::empty_like(send);
  group.all_to_all(received, send);
  return received.permute({1, 0, 2, 3, 4}).reshape({b, n * ls, h / n, d});
}

// [B, N·Ls, H/N, D] -> [B, Ls, H, D]: chunk i sent is rank i's tokens;
// chunk j received is head group j of this rank's tokens.
at::Tensor exchange_to_sequence(const at::Tensor& x, Comm& group) {
  const int64_t n = group.size(), b = x.size(0), l = x.size(1), h = x.size(2), d = x.size(3);
  if (l % n != 0) throw Error(fmt::format("heads_to_sequence: {} tokens do not split over {} ranks", l, n));
  const auto send = x.reshape({b, n, l / n, h, d}).permute({1, 0, 2, 3, 4}).contiguous();  // [N, B, Ls, H/N, D]
  auto received = at::empty_like(send);
  group.all_to_all(received, send);
  return received.permute({1, 2, 0, 3, 4}).reshape({b, l / n, n * h, d});
}

struct ToHeads : torch::autograd::Function<ToHeads> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return exchange_to_heads(x, *reinterpret_cast<Comm*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {exchange_to_sequence(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct ToSequence : torch::autograd::Function<ToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return exchange_to_sequence(x, *reinterpret_cast<Comm*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {exchange_to_heads(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group_handle) {
    ctx->saved_data["group"] = group_handle;
    Comm& group = *reinterpret_cast<Comm*>(group_handle);
    const int64_t n = group.size(), ls = x.size(1);
    ctx->saved_data["tokens"] = ls;
    const auto mine = x.contiguous();
    std::vector<int64_t> shape = {n};
    for (const auto size : mine.sizes()) shape.push_back(size);
    auto all = at::empty(shape, mine.options());  // [N, B, Ls, ...]
    group.all_gather(all, mine);
    std::vector<int64_t> order = {1, 0};
    for (int64_t k = 2; k < all.dim(); ++k) order.push_back(k);
    std::vector<int64_t> out_shape(mine.sizes().begin(), mine.sizes().end());
    out_shape[1] = n * ls;
    return all.permute(order).reshape(out_shape);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t ls = ctx->saved_data["tokens"].toInt();
    return {grads[0].narrow(1, group_of(ctx).rank() * ls, ls).contiguous(), at::Tensor()};
  }
};

int64_t handle(Comm& group) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&group)); }

}  // namespace

at::Tensor sequence_to_heads(const at::Tensor& x, Comm& group) {
  TORCH_CHECK(x.dim() == 4, "sequence_to_heads takes [B, tokens, heads, head_dim]");
  return ToHeads::apply(x, handle(group));
}

at::Tensor heads_to_sequence(const at::Tensor& x, Comm& group) {
  TORCH_CHECK(x.dim() == 4, "heads_to_sequence takes [B, tokens, heads, head_dim]");
  return ToSequence::apply(x, handle(group));
}

at::Tensor gather_sequence(const at::Tensor& x, Comm& group) {
  TORCH_CHECK(x.dim() >= 2, "gather_sequence takes [B, tokens, ...]");
  return GatherSequence::apply(x, handle(group));
}

}  // namespace wt::distributed
