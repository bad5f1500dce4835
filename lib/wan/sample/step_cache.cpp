#include "wantrain/wan/sample/step_cache.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/util/error.hpp"

namespace wt::wan {

const char* cache_method_name(CacheMethod method) {
  switch (method) {
    case CacheMethod::None: return "none";
    case CacheMethod::TeaCache: return "teacache";
    case CacheMethod::MagCache: return "magcache";
    case CacheMethod::EasyCache: return "easycache";
  }
  return "none";
}

CacheMethod parse_cache_method(const std::string& name) {
  for (auto method : {CacheMethod::None, CacheMethod::TeaCache, CacheMethod::MagCache, CacheMethod::EasyCache})
    if (name == cache_method_name(method)) return method;
  throw SettingError("cache", fmt::format("'{}' is not a step cache: none, teacache, magcache or easycache", name));
}

CacheRules cache_rules(const StepCacheSettings& settings, int steps) {
  CacheRules rules;
  switch (settings.method) {
    case CacheMethod::None: break;
    case CacheMethod::TeaCache:  // TeaCache4Wan2.1 with use_ret_steps; 0.08: the paper's 2x on T2V-1.3B
      rules = {0.08, 5, 0, 0};
      break;
    case CacheMethod::MagCache:  // MagCache4Wan2.1: magcache_thresh 0.12, magcache_K 2, retention_ratio 0.2
      rules = {0.12, int(steps * 0.2), 0, 2};
      break;
    case CacheMethod::EasyCache:  // EasyCache4Wan2.1: thresh 0.05, ret_steps 10, the last step run
      rules = {0.05, 10, 1, 0};
      break;
  }
  if (settings.threshold) {
    if (!(*settings.threshold >= 0) || !std::isfinite(*settings.threshold))
      throw SettingError("cache_threshold", fmt::format("{} is not a threshold (a number >= 0)", *settings.threshold));
    rules.threshold = *settings.threshold;
  }
  if (settings.keep_first) {
    if (*settings.keep_first < 0)
      throw SettingError("cache_keep_first", fmt::format("{} is not a number of steps (>= 0)", *settings.keep_first));
    rules.keep_first = *settings.keep_first;
  }
  if (settings.max_skips) {
    if (*settings.max_skips < 0)
      throw SettingError("cache_max_skips",
                         fmt::format("{} is not a number of steps (>= 0; 0: no limit)", *settings.max_skips));
    rules.max_skips = *settings.max_skips;
  }
  return rules;
}

double CacheCalibration::mag_ratio(int branch, int step, int steps) const {
  const auto& ratios = magcache[size_t(branch)];
  if (ratios.empty()) return 1.0;
  if (int(ratios.size()) == steps) return ratios[size_t(step)];
  if (steps == 1) return ratios.back();
  const double scale = double(ratios.size() - 1) / double(steps - 1);
  return ratios[size_t(std::nearbyint(step * scale))];  // numpy.round: half to even
}

bool TeaCacheRule::skip(bool kept, double relative_change, const std::vector<double>& polynomial,
                        const CacheRules& rules) {
  if (kept) {
    accumulated = 0;
    return false;
  }
  double rescaled = 0;
  for (double c : polynomial) rescaled = rescaled * relative_change + c;  // Horner, highest power first
  accumulated += rescaled;
  if (accumulated < rules.threshold) return true;
  accumulated = 0;
  return false;
}

bool MagCacheRule::skip(bool kept, double mag_ratio, const CacheRules& rules) {
  if (!kept) {
    ratio *= mag_ratio;
    steps += 1;
    error += std::abs(1.0 - ratio);
    if (error < rules.threshold && (rules.max_skips == 0 || steps <= rules.max_skips)) return true;
  }
  ratio = 1;
  error = 0;
  steps = 0;
  return false;
}

bool EasyCacheRule::skip(bool kept, double input_change, double last_output_mean, const CacheRules& rules) {
  if (kept) {
    accumulated = 0;
    return false;
  }
  if (!rate) return false;  // k needs two runs
  accumulated += *rate * input_change / last_output_mean;
  if (accumulated < rules.threshold) return true;
  accumulated = 0;
  return false;
}

bool within_max_skips(bool skip, int& in_a_row, const CacheRules& rules) {
  if (skip && rules.max_skips > 0 && in_a_row >= rules.max_skips) skip = false;
  in_a_row = skip ? in_a_row + 1 : 0;
  return skip;
}

namespace {

// Sums over this rank's token rows (dim 1) that are tokens, and over the
// sequence group, so that every rank of it decides alike: [sum, count].
std::array<double, 2> token_sums(const at::Tensor& values, const BlockStack& stack) {
  const auto valid = values.narrow(1, 0, stack.valid_tokens);
  std::array<double, 2> sums{valid.sum().item<double>(), double(valid.numel())};
  if (stack.group && stack.group->size() > 1) {
    auto both =
        torch::tensor({sums[0], sums[1]}, torch::TensorOptions().dtype(torch::kFloat64)).to(stack.input.device());
    stack.group->all_reduce(both);
    both = both.cpu();
    sums = {both[0].item<double>(), both[1].item<double>()};
  }
  return sums;
}

// mean |a - b| / mean |b| over tokens (TeaCache's and EasyCache's relative L1).
double relative_l1(const at::Tensor& a, const at::Tensor& b, const BlockStack& stack, bool per_token) {
  const auto diff = (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs();
  const auto base = b.to(torch::kFloat32).abs();
  if (!per_token) return diff.sum().item<double>() / base.sum().item<double>();
  return token_sums(diff, stack)[0] / token_sums(base, stack)[0];
}

double mean_abs(const at::Tensor& a, const BlockStack& stack) {
  const auto sums = token_sums(a.to(torch::kFloat32).abs(), stack);
  return sums[0] / sums[1];
}

}  // namespace

class StepCaching::Branch : public BlockStackCache {
 public:
  Branch(StepCaching& owner, int model, int branch, int first_step, int steps)
      : owner_(owner),
        model_(model),
        branch_(branch),
        step_(first_step - 1),
        steps_(steps),
        rules_(cache_rules(owner.settings_, steps)) {}

  at::Tensor skip(const BlockStack& stack) override {
    ++step_;
    if (owner_.recording_) return {};
    const auto method = owner_.settings_.method;
    const bool per_token = stack.e0.dim() == 4;
    bool kept = step_ < rules_.keep_first || step_ >= steps_ - rules_.keep_last || !residual_.defined();
    bool skip = false;
    switch (method) {
      case CacheMethod::None: return {};
      case CacheMethod::TeaCache: {
        const double change = previous_e0_.defined() ? relative_l1(stack.e0, previous_e0_, stack, per_token) : 0.0;
        kept = kept || !previous_e0_.defined();
        previous_e0_ = stack.e0;
        skip = tea_.skip(kept, change, calibration().teacache, rules_);
        if (skip != within_max_skips(skip, in_a_row_, rules_)) skip = tea_.skip(true, 0, {}, rules_);
        break;
      }
      case CacheMethod::MagCache:
        skip = mag_.skip(kept, calibration().mag_ratio(branch_, step_, steps_), rules_);
        break;
      case CacheMethod::EasyCache: {
        const double change = previous_input_.defined() ? mean_abs(stack.input - previous_input_, stack) : 0.0;
        kept = kept || !previous_input_.defined();
        previous_input_ = stack.input;
        skip = easy_.skip(kept, change, last_output_mean_, rules_);
        if (skip != within_max_skips(skip, in_a_row_, rules_)) skip = easy_.skip(true, 0, 0, rules_);
        break;
      }
    }
    if (!skip) return {};
    ++owner_.counts_.skipped;
    return stack.input + residual_;
  }

  void ran(const BlockStack& stack, const at::Tensor& output) override {
    ++owner_.counts_.ran;
    const auto residual = output - stack.input;
    if (owner_.recording_) record(stack, output, residual);
    if (owner_.settings_.method == CacheMethod::EasyCache) {
      if (last_input_.defined()) {
        const double input_change = mean_abs(stack.input - last_input_, stack);
        if (input_change > 0) easy_.rate = mean_abs(output - last_output_, stack) / input_change;
      }
      last_input_ = stack.input;
      last_output_ = output;
      last_output_mean_ = mean_abs(output, stack);
    }
    residual_ = residual;
  }

 private:
  const CacheCalibration& calibration() const { return *owner_.calibrations_[size_t(model_)]; }

  void record(const BlockStack& stack, const at::Tensor& output, const at::Tensor& residual) {
    auto& r = owner_.records_[size_t(model_)];
    const bool per_token = stack.e0.dim() == 4;
    if (previous_e0_.defined()) {
      r.e0_change.push_back(relative_l1(stack.e0, previous_e0_, stack, per_token));
      r.output_change.push_back(relative_l1(output, last_output_, stack, true));
    }
    auto& sum = r.ratio_sum[size_t(branch_)];
    auto& count = r.ratio_count[size_t(branch_)];
    if (sum.size() < size_t(steps_)) {
      sum.resize(size_t(steps_), 0.0);
      count.resize(size_t(steps_), 0);
    }
    // MagCache's ratio: the mean over tokens of |residual| / |previous residual| (norms over channels).
    double ratio = 1.0;
    if (residual_.defined()) {
      const auto norms = residual.to(torch::kFloat32).norm(2, -1) / residual_.to(torch::kFloat32).norm(2, -1);
      const auto sums = token_sums(norms, stack);
      ratio = sums[0] / sums[1];
    }
    sum[size_t(step_)] += ratio;
    count[size_t(step_)] += 1;
    previous_e0_ = stack.e0;
    last_output_ = output;
  }

  StepCaching& owner_;
  int model_, branch_, step_, steps_;
  CacheRules rules_;
  at::Tensor residual_, previous_e0_, previous_input_, last_input_, last_output_;
  double last_output_mean_ = 1;
  int in_a_row_ = 0;
  TeaCacheRule tea_;
  MagCacheRule mag_;
  EasyCacheRule easy_;
};

StepCaching::StepCaching(StepCacheSettings settings, std::shared_ptr<const CacheCalibration> low,
                         std::shared_ptr<const CacheCalibration> high)
    : settings_(settings), calibrations_{std::move(low), std::move(high)} {
  cache_rules(settings_, 50);  // the settings' errors now, before any model is read
  const bool needs = settings_.method == CacheMethod::TeaCache || settings_.method == CacheMethod::MagCache;
  if (needs && !calibrations_[0])
    throw SettingError("cache",
                       fmt::format("{} needs a calibration of the model", cache_method_name(settings_.method)));
}

std::unique_ptr<StepCaching> StepCaching::calibrating() {
  auto caching = std::make_unique<StepCaching>(StepCacheSettings{}, nullptr, nullptr);
  caching->recording_ = true;
  return caching;
}

StepCaching::~StepCaching() = default;

void StepCaching::begin_draw(int steps, int high_steps) {
  const bool needs = settings_.method == CacheMethod::TeaCache || settings_.method == CacheMethod::MagCache;
  if (needs && high_steps > 0 && !calibrations_[1])
    throw SettingError("cache", fmt::format("{} needs a calibration of the high-noise expert too",
                                            cache_method_name(settings_.method)));
  branches_.clear();
  for (int model = 0; model < 2; ++model)
    for (int branch = 0; branch < 2; ++branch)
      branches_.push_back(std::make_unique<Branch>(*this, model, branch, model == 1 ? 0 : high_steps, steps));
}

BlockStackCache* StepCaching::branch(bool high, bool conditional) {
  if (!recording_ && settings_.method == CacheMethod::None) return nullptr;
  return branches_.at(size_t((high ? 1 : 0) * 2 + (conditional ? 0 : 1))).get();
}

std::string StepCaching::describe(int steps) const {
  if (recording_) return "recording a calibration";
  const auto rules = cache_rules(settings_, steps);
  std::string text = fmt::format("{} (threshold {}, the first {} step{} run", cache_method_name(settings_.method),
                                 rules.threshold, rules.keep_first, rules.keep_first == 1 ? "" : "s");
  if (rules.keep_last > 0) text += fmt::format(", the last {}", rules.keep_last);
  if (rules.max_skips > 0) text += fmt::format(", at most {} skipped in a row", rules.max_skips);
  return text + ")";
}

}  // namespace wt::wan
