// Step caching (wan/sample/step_cache): each method's skip decisions over a
// 50-step guided sample against a reference written from the paper's
// equations as the authors' Wan2.1 scripts run them (one counter over the
// interleaved conditional and unconditional calls, a state per parity),
// the reset at A14B's expert switch, what a cached draw through the
// sampling core gives, and the calibration's fit and file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../../../common/small_models.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/sample/cache_calibration.hpp"
#include "wantrain/wan/sample/sampling_core.hpp"
#include "wantrain/wan/sample/step_cache.hpp"

namespace wt::wan {
namespace {

constexpr int kSteps = 50;
constexpr int64_t kTokens = 12, kDim = 8;

// A guided sample's block-stack traffic without a model: at step i, branch
// b sees tokens x(i, b) drifting smoothly, the modulation e0 of the
// schedule's timestep, and the blocks would output tanh(1.5 x) + 0.1.
struct Stream {
  std::vector<double> timesteps;
  Stream() {
    const auto solver = make_flow_solver(Solver::UniPC, kSteps, 5.0, Schedule::Release);
    for (int i = 0; i < kSteps; ++i) timesteps.push_back(solver->timestep(i));
  }
  at::Tensor input(int step, int branch) const {
    const auto grid = torch::arange(kTokens * kDim, torch::kFloat32).reshape({1, kTokens, kDim});
    const double s = step / double(kSteps);
    return torch::sin(grid * 0.37 + 3 * s * s + 0.2 * branch) * (1 + s) + 0.05 * branch;
  }
  at::Tensor e0(int step) const {
    const auto grid = torch::arange(6 * kDim, torch::kFloat32).reshape({1, 6, kDim});
    return torch::cos(grid * 0.11 + timesteps[size_t(step)] / 1000.0 * 2.5) + 1.5;
  }
  static at::Tensor output(const at::Tensor& input) { return torch::tanh(1.5 * input) + 0.1; }
};

double mean_abs(const at::Tensor& t) { return t.abs().mean().item<double>(); }

// Runs `caching` over the stream (the high-noise expert's for the first
// `high_steps`): the skip decisions, in the scripts' order (cnt = 2 step + branch).
std::vector<bool> decisions(StepCaching& caching, int high_steps = 0) {
  const Stream stream;
  caching.begin_draw(kSteps, high_steps);
  std::vector<bool> skipped;
  for (int step = 0; step < kSteps; ++step)
    for (int branch = 0; branch < 2; ++branch) {
      auto* cache = caching.branch(step < high_steps, branch == 0);
      const auto x = stream.input(step, branch), e0 = stream.e0(step);
      const BlockStack stack{x, e0.select(1, 0), e0, kTokens, nullptr};
      const auto out = cache->skip(stack);
      skipped.push_back(out.defined());
      if (!out.defined()) cache->ran(stack, Stream::output(x));
    }
  return skipped;
}

// TeaCache4Wan2.1's teacache_forward with use_ret_steps: modulated_inp = e0;
// retained while cnt < ret_steps (5 * 2); rescale_func = poly1d(coefficients).
std::vector<bool> teacache_reference(const std::vector<double>& coefficients, double thresh, int reset_at = -1) {
  const Stream stream;
  const int ret_steps = 5 * 2, cutoff_steps = kSteps * 2;
  double accumulated[2] = {0, 0};
  at::Tensor previous_e0[2];
  std::vector<bool> skipped;
  for (int cnt = 0; cnt < 2 * kSteps; ++cnt) {
    const int parity = cnt % 2, step = cnt / 2;
    if (step == reset_at) previous_e0[parity] = at::Tensor(), accumulated[parity] = 0;  // a fresh model
    const auto modulated = stream.e0(step);
    bool calc = true;
    if (cnt < ret_steps || cnt >= cutoff_steps || !previous_e0[parity].defined()) {
      accumulated[parity] = 0;
    } else {
      const double rel = mean_abs(modulated - previous_e0[parity]) / mean_abs(previous_e0[parity]);
      double rescaled = 0;
      for (size_t k = 0; k < coefficients.size(); ++k)
        rescaled += coefficients[k] * std::pow(rel, double(coefficients.size() - 1 - k));
      accumulated[parity] += rescaled;
      if (accumulated[parity] < thresh)
        calc = false;
      else
        accumulated[parity] = 0;
    }
    previous_e0[parity] = modulated;
    skipped.push_back(!calc);
  }
  return skipped;
}

// MagCache4Wan2.1's magcache_forward: mag_ratios interleaved (cond, uncond),
// nothing before num_steps * retention_ratio calls; K skips at most.
std::vector<bool> magcache_reference(const std::vector<double>& mag_ratios, double thresh, int k,
                                     double retention_ratio) {
  const int num_steps = 2 * kSteps;
  double accumulated_ratio[2] = {1, 1}, accumulated_err[2] = {0, 0};
  int accumulated_steps[2] = {0, 0};
  std::vector<bool> skipped;
  for (int cnt = 0; cnt < num_steps; ++cnt) {
    const int p = cnt % 2;
    bool skip = false;
    if (cnt >= int(num_steps * retention_ratio)) {
      accumulated_ratio[p] *= mag_ratios[size_t(cnt)];
      accumulated_steps[p] += 1;
      accumulated_err[p] += std::abs(1 - accumulated_ratio[p]);
      if (accumulated_err[p] < thresh && accumulated_steps[p] <= k) {
        skip = true;
      } else {
        accumulated_err[p] = 0;
        accumulated_steps[p] = 0;
        accumulated_ratio[p] = 1.0;
      }
    }
    skipped.push_back(skip);
  }
  return skipped;
}

// EasyCache4Wan2.1's easycache_forward, each branch deciding for itself:
// retained while cnt < ret_steps (10 * 2) and from cutoff_steps (2 steps - 2);
// k = output change / input change between the last two computed calls.
std::vector<bool> easycache_reference(double thresh) {
  const Stream stream;
  const int ret_steps = 10 * 2, cutoff_steps = 2 * kSteps - 2;
  double accumulated[2] = {0, 0};
  std::optional<double> k[2];
  at::Tensor previous_input[2], computed_input[2], computed_output[2];
  std::vector<bool> skipped;
  for (int cnt = 0; cnt < 2 * kSteps; ++cnt) {
    const int p = cnt % 2;
    const auto x = stream.input(cnt / 2, p);
    bool calc = true;
    if (cnt < ret_steps || cnt >= cutoff_steps) {
      accumulated[p] = 0;
    } else if (k[p]) {
      accumulated[p] += *k[p] * mean_abs(x - previous_input[p]) / mean_abs(computed_output[p]);
      if (accumulated[p] < thresh)
        calc = false;
      else
        accumulated[p] = 0;
    }
    previous_input[p] = x;
    if (calc) {
      const auto out = Stream::output(x);
      if (computed_input[p].defined()) k[p] = mean_abs(out - computed_output[p]) / mean_abs(x - computed_input[p]);
      computed_input[p] = x;
      computed_output[p] = out;
    }
    skipped.push_back(!calc);
  }
  return skipped;
}

int count(const std::vector<bool>& v) { return int(std::count(v.begin(), v.end(), true)); }

TEST(StepCache, TeaCacheDecidesAsThePapersRule) {
  const std::vector<double> poly = {0, 0, 40.0, 2.0, 0.001};
  auto calibration = std::make_shared<CacheCalibration>();
  calibration->teacache = poly;
  StepCaching caching({CacheMethod::TeaCache, 0.08, {}, {}}, calibration);
  const auto ours = decisions(caching);
  EXPECT_EQ(ours, teacache_reference(poly, 0.08));
  EXPECT_GT(count(ours), 10);  // it skips,
  EXPECT_LT(count(ours), 90);  // and it runs
  EXPECT_EQ(caching.counts().skipped, count(ours));
  EXPECT_EQ(caching.counts().ran + caching.counts().skipped, 2 * kSteps);
  // The accumulation matters: a rule that looked at one step's change alone skips more.
  EXPECT_NE(ours, teacache_reference({0, 0, 0, 0, 0.001}, 0.08));
}

TEST(StepCache, MagCacheDecidesAsThePapersRule) {
  std::vector<double> interleaved;
  auto calibration = std::make_shared<CacheCalibration>();
  for (int step = 0; step < kSteps; ++step)
    for (int branch = 0; branch < 2; ++branch) {
      const double ratio = step == 0 ? 1.0 : 1.01 - 0.0009 * step - 0.002 * branch + 0.004 * std::sin(step * 0.7);
      interleaved.push_back(ratio);
      calibration->magcache[size_t(branch)].push_back(ratio);
    }
  StepCaching caching({CacheMethod::MagCache, {}, {}, {}}, calibration);  // 0.12, K 2, 20% kept
  const auto ours = decisions(caching);
  EXPECT_EQ(ours, magcache_reference(interleaved, 0.12, 2, 0.2));
  EXPECT_GT(count(ours), 10);
  EXPECT_LT(count(ours), 90);
  EXPECT_NE(ours, magcache_reference(interleaved, 0.12, 3, 0.2));  // K bounds the skips in a row
}

TEST(StepCache, EasyCacheDecidesAsThePapersRule) {
  StepCaching caching({CacheMethod::EasyCache, {}, {}, {}}, nullptr);  // 0.05, 10 kept, the last run
  const auto ours = decisions(caching);
  EXPECT_EQ(ours, easycache_reference(0.05));
  EXPECT_GT(count(ours), 10);
  EXPECT_LT(count(ours), 90);
}

TEST(StepCache, TheLowNoiseExpertStartsAfreshAtTheSwitch) {
  const std::vector<double> poly = {0, 0, 40.0, 2.0, 0.001};
  auto calibration = std::make_shared<CacheCalibration>();
  calibration->teacache = poly;
  const int switch_step = 23;
  StepCaching caching({CacheMethod::TeaCache, 0.08, {}, {}}, calibration, calibration);
  const auto ours = decisions(caching, switch_step);
  EXPECT_EQ(ours, teacache_reference(poly, 0.08, switch_step));
  EXPECT_FALSE(ours[2 * switch_step]);  // the new expert's first step runs, for both branches
  EXPECT_FALSE(ours[2 * switch_step + 1]);
  EXPECT_NE(ours, teacache_reference(poly, 0.08));  // without the reset, other steps
}

TEST(StepCache, MaxSkipsBoundsTheStepsSkippedInARow) {
  StepCaching caching({CacheMethod::EasyCache, 0.5, {}, 1}, nullptr);
  const auto ours = decisions(caching);
  EXPECT_GT(count(ours), 10);
  for (size_t i = 2; i < ours.size(); ++i) EXPECT_FALSE(ours[i] && ours[i - 2]) << "call " << i;
}

TEST(StepCache, SettingsErrorsNameTheSetting) {
  auto setting_of = [](const StepCacheSettings& s) {
    try {
      cache_rules(s, 50);
    } catch (const SettingError& e) {
      return e.setting();
    }
    return std::string();
  };
  EXPECT_EQ(setting_of({CacheMethod::EasyCache, -1.0, {}, {}}), "cache_threshold");
  EXPECT_EQ(setting_of({CacheMethod::EasyCache, {}, -2, {}}), "cache_keep_first");
  EXPECT_EQ(setting_of({CacheMethod::MagCache, {}, {}, -1}), "cache_max_skips");
  EXPECT_THROW(parse_cache_method("fastcache"), SettingError);
  EXPECT_THROW(StepCaching({CacheMethod::MagCache, {}, {}, {}}, nullptr), SettingError);  // needs a calibration
}

struct Draw {
  WanModel model = testing::seeded_small_model(testing::small_wan_config(2));
  SampleCondition condition;
  SamplerOptions sampler;
  at::Tensor noise = seeded_noise({1, 4, 2, 4, 4}, 5);
  Draw() {
    model->eval();
    torch::manual_seed(3);
    condition.context = torch::randn({8, 16});
    sampler.steps = 30;
    sampler.cfg = 3;
  }
  at::Tensor draw(StepCaching* caching) {
    SampleModels models;
    models.model = model.get();
    models.caching = caching;
    return draw_latents(models, condition, sampler, noise, at::kFloat);
  }
};

TEST(StepCache, ADrawThatSkipsNothingIsTheUncachedDraw) {
  Draw d;
  const auto plain = d.draw(nullptr);
  StepCaching never({CacheMethod::EasyCache, 0.0, {}, {}}, nullptr);
  EXPECT_TRUE(torch::equal(d.draw(&never), plain));
  EXPECT_EQ(never.counts().skipped, 0);
  EXPECT_EQ(never.counts().ran, 2 * 30);
}

TEST(StepCache, ADrawThatSkipsStaysNearTheUncachedDraw) {
  Draw d;
  const auto plain = d.draw(nullptr);
  StepCaching often({CacheMethod::EasyCache, 0.2, 5, {}}, nullptr);
  const auto cached = d.draw(&often);
  EXPECT_GT(often.counts().skipped, 10);
  EXPECT_EQ(often.counts().ran + often.counts().skipped, 2 * 30);
  EXPECT_FALSE(torch::equal(cached, plain));
  // Relative error well under the latents' own scale.
  EXPECT_LT((cached - plain).norm().item<double>(), 0.2 * plain.norm().item<double>());
}

TEST(StepCacheCalibration, FitRecoversAPolynomialAndAveragesTheRatios) {
  const std::vector<double> poly = {300.0, -40.0, 3.0, 0.8, 0.002};
  CacheRecord record;
  for (int i = 1; i <= 40; ++i) {
    const double x = 0.002 * i;
    double y = 0;
    for (double c : poly) y = y * x + c;
    record.e0_change.push_back(x);
    record.output_change.push_back(y);
  }
  record.ratio_sum = {std::vector<double>{2.0, 1.9, 2.1}, std::vector<double>{2.0, 3.0, 0.0}};
  record.ratio_count = {std::vector<int>{2, 2, 2}, std::vector<int>{2, 3, 0}};
  const auto fitted = fit_calibration(record);
  ASSERT_EQ(fitted.teacache.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(fitted.teacache[i], poly[i], 1e-6 * std::abs(poly[0]) + 1e-9) << i;
  EXPECT_EQ(fitted.magcache[0], (std::vector<double>{1.0, 0.95, 1.05}));
  EXPECT_EQ(fitted.magcache[1], (std::vector<double>{1.0, 1.0, 1.0}));  // a step without records: 1
  // Ratios for another step count: the nearest (MagCache's nearest_interp).
  EXPECT_EQ(fitted.mag_ratio(0, 1, 5), 1.0);   // step 1 * 2 / 4 = 0.5: numpy.round goes to the even 0
  EXPECT_EQ(fitted.mag_ratio(0, 3, 5), 1.05);  // 1.5 -> 2
  EXPECT_EQ(fitted.mag_ratio(0, 4, 5), 1.05);
}

TEST(StepCacheCalibration, TheFileRoundTripsAndABadOneNamesItsKey) {
  const auto dir = std::filesystem::temp_directory_path() / "wantrain-step-cache-test";
  std::filesystem::create_directories(dir);
  CacheCalibrationFile file;
  file.steps = 3;
  file.samples = 2;
  file.solver = "unipc";
  file.shift = 5;
  file.cfg = 4;
  CacheCalibration c;
  c.teacache = {1, 2, 3, 4, 5};
  c.magcache = {std::vector<double>{1, 0.9, 0.8}, std::vector<double>{1, 0.95, 0.85}};
  file.models["model"] = c;
  const auto path = (dir / "step-cache.json").string();
  write_calibration_file(path, file);
  const auto read = read_calibration_file(path);
  EXPECT_EQ(read.steps, 3);
  EXPECT_EQ(read.models.at("model").teacache, c.teacache);
  EXPECT_EQ(read.models.at("model").magcache[1], c.magcache[1]);
  EXPECT_EQ(calibration_beside(dir.string()), path);
  EXPECT_EQ(calibration_beside((dir / "ema.safetensors").string()), (dir / "ema.step-cache.json").string());
  std::ofstream(path) << R"({"format": "wantrain step cache 1", "steps": 3, "samples": 1, "shift": 5, "cfg": 4,
    "models": {"model": {"teacache": [1, 2], "magcache": {"conditional": [1, 1, 1], "unconditional": [1, 1, 1]}}}})";
  try {
    read_calibration_file(path);
    FAIL() << "a two-term polynomial was read";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("models.model.teacache"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(StepCacheCalibration, ReleasedShapesHavePublishedFiguresOthersNone) {
  WanConfig t2v;
  t2v.dim = 1536;
  t2v.num_layers = 30;
  t2v.in_dim = t2v.out_dim = 16;
  const auto small = published_calibration(t2v, "Wan2.1-T2V-1.3B");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->magcache[0].size(), 50u);
  EXPECT_EQ(small->teacache.size(), 5u);
  EXPECT_NE(small->source.find("Wan2.1-T2V-1.3B"), std::string::npos);
  t2v.num_layers = 2;
  EXPECT_FALSE(published_calibration(t2v, "mine"));
}

}  // namespace
}  // namespace wt::wan
