#include "wantrain/wan/model/reference_frame.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

#include "wantrain/util/error.hpp"

namespace wt::wan {

ModelCondition pick_reference(const ModelCondition& data, int64_t z, const std::vector<bool>& other,
                              const std::vector<bool>& reference_dropped) {
  const auto& y = data.y;
  if (!y.defined() || y.dim() != 5 || y.size(1) != 3 * z)
    throw Error(fmt::format("pick_reference: y must be [B, {}, F, H, W] (control, start, reference)", 3 * z));
  const int64_t b = y.size(0);
  const auto rows = [&](const std::vector<bool>& v) { return v.empty() || int64_t(v.size()) == b; };
  if (!rows(other) || !rows(reference_dropped)) throw Error("pick_reference: one draw per batch row");
  const auto shown = [&](int64_t i) { return !other.empty() && other[size_t(i)]; };
  ModelCondition out = data;
  out.y = y.narrow(1, 0, 2 * z).clone();  // [B, 2z, F, H, W]: control, start
  const bool any_other = std::any_of(other.begin(), other.end(), [](bool v) { return v; });
  if (any_other) out.full_ref = torch::zeros({b, z, y.size(3), y.size(4)}, y.options());
  const bool with_clip = data.clip_fea.defined();
  const int64_t tokens = with_clip ? data.clip_fea.size(1) / 2 : 0;
  if (with_clip) {
    if (data.clip_fea.size(1) % 2 != 0)
      throw Error("pick_reference: clip_fea must hold two pictures' features (start, reference)");
    out.clip_fea = data.clip_fea.narrow(1, 0, tokens).clone();
  }
  for (int64_t i = 0; i < b; ++i) {
    if (!shown(i)) continue;
    out.y[i].narrow(0, z, z).zero_();  // no start: the reference shows the clip
    if (reference_dropped.empty() || !reference_dropped[size_t(i)])
      out.full_ref[i].copy_(y[i].narrow(0, 2 * z, z).select(1, 0));
    if (with_clip) out.clip_fea[i].copy_(data.clip_fea[i].narrow(0, tokens, tokens));
  }
  return out;
}

ModelCondition shown_condition(const ModelCondition& data, const WanConfig& config) {
  const int64_t channels = config.reference_y_channels();
  if (channels == 0 || !data.y.defined() || data.y.size(1) != channels) return data;
  return pick_reference(data, config.out_dim);
}

}  // namespace wt::wan
