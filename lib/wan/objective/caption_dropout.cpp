#include "wantrain/wan/objective/caption_dropout.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "wantrain/data/sampler.hpp"
#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/model/unconditional_context.hpp"

namespace wt::wan {
namespace {
// Mixed into the seed so the drop stream is independent of the noise stream
// keyed by the same (seed, step, index).
constexpr uint64_t kCaptionDropSalt = 0x63617074696f6e21;    // "caption!"
constexpr uint64_t kImageDropSalt = 0x7069637475726521;      // "picture!"
constexpr uint64_t kFirstFrameSalt = 0x6b65657066726d30;     // "keepfrm0"
constexpr uint64_t kControlDropSalt = 0x636f6e74726f6c21;    // "control!"
constexpr uint64_t kStartDropSalt = 0x7374617274667221;      // "startfr!"
constexpr uint64_t kReferenceSalt = 0x7265666672616d65;      // "refframe"
constexpr uint64_t kReferenceDropSalt = 0x72656664726f7021;  // "refdrop!"

std::vector<bool> drops_with_salt(const std::vector<int64_t>& sample_indices, uint64_t salted_seed, int64_t step,
                                  double p) {
  std::vector<bool> drops(sample_indices.size(), p >= 1.0);
  if (p <= 0.0 || p >= 1.0) return drops;
  for (size_t i = 0; i < sample_indices.size(); ++i) {
    data::PortableRandom r(sample_key(salted_seed, step, sample_indices[i]));
    drops[i] = double(r.next() >> 11) * 0x1.0p-53 < p;  // uniform in [0, 1)
  }
  return drops;
}

}  // namespace

std::vector<bool> caption_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p) {
  return drops_with_salt(sample_indices, seed ^ kCaptionDropSalt, step, p);
}

std::vector<bool> image_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p) {
  return drops_with_salt(sample_indices, seed ^ kImageDropSalt, step, p);
}

std::vector<bool> control_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p) {
  return drops_with_salt(sample_indices, seed ^ kControlDropSalt, step, p);
}

std::vector<bool> start_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p) {
  return drops_with_salt(sample_indices, seed ^ kStartDropSalt, step, p);
}

at::Tensor drop_fun_control(const at::Tensor& y, int64_t control_channels, const std::vector<bool>& control,
                            const std::vector<bool>& start) {
  TORCH_CHECK(y.dim() == 5 && control_channels > 0 && control_channels < y.size(1),
              "a Fun-Control y is [B, C + S, F, H, W]");
  TORCH_CHECK(int64_t(control.size()) == y.size(0) && int64_t(start.size()) == y.size(0), "one draw per batch row");
  const auto any = [](const std::vector<bool>& d) { return std::any_of(d.begin(), d.end(), [](bool v) { return v; }); };
  if (!any(control) && !any(start)) return y;
  auto out = y.clone();
  const int64_t rest = y.size(1) - control_channels;
  for (int64_t i = 0; i < y.size(0); ++i) {
    if (control[size_t(i)]) out[i].narrow(0, 0, control_channels).zero_();
    if (start[size_t(i)]) out[i].narrow(0, control_channels, rest).zero_();
  }
  return out;
}

std::vector<bool> reference_draws(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p,
                                  int64_t frames) {
  if (frames < 2) return std::vector<bool>(sample_indices.size(), false);
  return drops_with_salt(sample_indices, seed ^ kReferenceSalt, step, p);
}

std::vector<bool> reference_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p) {
  return drops_with_salt(sample_indices, seed ^ kReferenceDropSalt, step, p);
}

std::vector<bool> first_frame_draws(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p,
                                    int64_t frames) {
  if (frames < 2) return std::vector<bool>(sample_indices.size(), false);
  return drops_with_salt(sample_indices, seed ^ kFirstFrameSalt, step, p);
}

at::Tensor drop_captions(const at::Tensor& context, const std::vector<bool>& drops) {
  TORCH_CHECK(int64_t(drops.size()) == context.size(0), "one caption drop per batch row");
  if (std::none_of(drops.begin(), drops.end(), [](bool d) { return d; })) return context;
  std::vector<uint8_t> keep(drops.size());
  for (size_t i = 0; i < drops.size(); ++i) keep[i] = drops[i] ? 0 : 1;
  return drop_captions(context, torch::tensor(keep).to(context.device(), torch::kBool));
}

at::Tensor drop_captions(const at::Tensor& context, const at::Tensor& keep) {
  TORCH_CHECK(keep.dim() == 1 && keep.size(0) == context.size(0) && keep.scalar_type() == torch::kBool,
              "one bool per batch row");
  return torch::where(keep.view({-1, 1, 1}), context, unconditional_context(context));  // keep: [B, 1, 1]
}

}  // namespace wt::wan
