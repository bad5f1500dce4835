#include "wantrain/wan/sample/release_defaults.hpp"

#include <fmt/format.h>

namespace wt::wan {

namespace {

// wan/configs/shared_config.py's sample_neg_prompt, shared by Wan2.1 and
// Wan2.2; Wan2.1's I2V config puts "镜头晃动，" (shaky camera) before it,
// and its FLF2V config (a copy of I2V's) "镜头切换，" (a cut) before that.
const char* const kNegativePrompt =
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
    "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，"
    "静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走";
const char* const kShakyCamera = "镜头晃动，";
const char* const kCut = "镜头切换，";

bool shape_is(const WanConfig& c, int64_t dim, int64_t layers, int64_t heads, int64_t ffn_dim) {
  return c.dim == dim && c.num_layers == layers && c.num_heads == heads && c.ffn_dim == ffn_dim && c.text_dim == 4096 &&
         c.patch_size == std::array<int64_t, 3>{1, 2, 2};
}

}  // namespace

std::optional<ReleaseSampling> release_sampling(const WanConfig& config, bool two_experts, int64_t pixels) {
  ReleaseSampling r;
  r.negative_prompt = kNegativePrompt;
  const bool wide_14b = shape_is(config, 5120, 40, 40, 13824);
  switch (config.model_type) {
    case ModelType::T2V:
      if (shape_is(config, 1536, 30, 12, 8960) && !two_experts) {
        r.model = "Wan2.1 T2V-1.3B";
        return r;
      }
      if (!wide_14b) return std::nullopt;
      if (!two_experts) {
        r.model = "Wan2.1 T2V-14B";
        return r;
      }
      r.model = "Wan2.2 T2V-A14B";
      r.steps = 40;
      r.shift = 12.0;
      r.cfg_low = 3.0;
      r.cfg_high = 4.0;
      r.boundary = 0.875;
      return r;
    case ModelType::I2V:
      if (config.holds_start_frame()) {
        // VideoX-Fun's examples/wan2.2_fun/predict_v2v_control_5b.py: "Flow"
        // (Euler) at shift 5, 40 steps, guidance 6, one model.
        if (two_experts || !shape_is(config, 3072, 30, 24, 14336) || config.image_branch()) return std::nullopt;
        r.model = "Wan2.2-Fun-5B-Control";
        r.steps = 40;
        r.cfg_low = r.cfg_high = 6.0;
        r.solver = Solver::Euler;
        return r;
      }
      if (config.fun_control_with_mask()) {
        // VideoX-Fun's examples/wan2.2_fun/predict_v2v_control.py: "Flow"
        // (Euler) at shift 5, 50 steps, guidance 6, the experts switching at
        // its config's boundary 0.900 (config/wan2.2/wan_civitai_i2v.yaml).
        if (!two_experts || !wide_14b || config.image_branch()) return std::nullopt;
        r.model = "Wan2.2-Fun-A14B-Control";
        r.cfg_low = r.cfg_high = 6.0;
        r.solver = Solver::Euler;
        r.boundary = 0.9;
        return r;
      }
      if (config.fun_control()) {
        // VideoX-Fun's examples/wan2.1_fun/predict_v2v_control*.py: the
        // "Flow" sampler (Euler) at its config's shift 5, 50 steps, guidance 6.
        if (two_experts || config.image_dim != 1280) return std::nullopt;
        const char* version = config.ref_conv ? "-V1.1" : "";
        if (shape_is(config, 1536, 30, 12, 8960))
          r.model = fmt::format("Wan2.1-Fun{}-1.3B-Control", version);
        else if (wide_14b)
          r.model = fmt::format("Wan2.1-Fun{}-14B-Control", version);
        else
          return std::nullopt;
        r.cfg_low = r.cfg_high = 6.0;
        r.solver = Solver::Euler;
        return r;
      }
      if (!wide_14b) return std::nullopt;
      if (config.image_branch()) {  // Wan2.1's reads CLIP features
        if (two_experts) return std::nullopt;
        r.model = "Wan2.1 I2V-14B";
        r.steps = 40;
        // generate.py: shift 3 for 832x480 and 480x832, else 5.
        if (pixels == 832 * 480) r.shift = 3.0;
        r.negative_prompt = std::string(kShakyCamera) + kNegativePrompt;
        return r;
      }
      r.model = "Wan2.2 I2V-A14B";
      r.steps = 40;
      r.cfg_low = r.cfg_high = 3.5;
      r.boundary = 0.9;
      return r;
    case ModelType::FLF2V:
      if (!wide_14b || two_experts) return std::nullopt;
      r.model = "Wan2.1 FLF2V-14B";
      r.shift = 16.0;
      r.negative_prompt = std::string(kCut) + kShakyCamera + kNegativePrompt;
      return r;
    case ModelType::TI2V:
      if (!shape_is(config, 3072, 30, 24, 14336) || two_experts) return std::nullopt;
      r.model = "Wan2.2 TI2V-5B";
      return r;
    case ModelType::VACE:
      // generate.py's vace-1.3B and vace-14B: t2v's configs, shift 16.
      if (two_experts || config.vace_in_dim != 96) return std::nullopt;
      if (shape_is(config, 1536, 30, 12, 8960))
        r.model = "Wan2.1 VACE-1.3B";
      else if (wide_14b)
        r.model = "Wan2.1 VACE-14B";
      else
        return std::nullopt;
      r.shift = 16.0;
      return r;
  }
  return std::nullopt;
}

UnconditionalBranch unconditional_branch(const std::optional<std::string>& given,
                                         const std::optional<ReleaseSampling>& release, bool wantrain_checkpoint) {
  if (given)
    return {*given, given->empty() ? "the all-zero context (--negative-prompt '')" : "--negative-prompt's embedding"};
  if (release && !wantrain_checkpoint)
    return {release->negative_prompt,
            fmt::format("{}'s negative prompt (sample_neg_prompt; --negative-prompt replaces it)", release->model)};
  return {"", fmt::format("the all-zero context that wantrain --text-drop trains ({})",
                          wantrain_checkpoint ? "a wantrain checkpoint" : "a model of no released shape")};
}

double release_boundary(ModelType type) { return type == ModelType::I2V ? 0.9 : 0.875; }

}  // namespace wt::wan
