// Distillation's pieces: the projection rules of a student from a teacher,
// the loss, and the frozen teacher (loading, checksum, bf16).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/wan/model/projection.hpp"
#include "wantrain/nn/tensor_memory.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/objective/distillation.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using wt::io::NamedTensors;
using wt::wan::Projection;
using wt::wan::WanConfig;
using wt::wan::WanModel;

WanConfig config(int64_t dim, int64_t layers, std::array<int64_t, 3> patch = {1, 2, 2}) {
  WanConfig c;
  c.dim = dim;
  c.ffn_dim = 2 * dim;
  c.num_heads = 2;
  c.num_layers = layers;
  c.freq_dim = 256;
  c.text_dim = 16;
  c.text_len = 4;
  c.patch_size = patch;
  c.in_dim = 4;
  c.out_dim = 4;
  return c;
}

NamedTensors named(const WanModel& model) {
  NamedTensors out;
  for (const auto& item : model->named_parameters(true)) out.emplace_back(item.key(), item.value());
  return out;
}

// Wan zero-initialises the head; a teacher with a random head (and random
// everything else) makes every output depend on every weight.
WanModel random_model(const WanConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  WanModel model(c);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.normal_(0.0, 0.2);
  return model;
}

at::Tensor parameter(const WanModel& model, const std::string& name) { return model->named_parameters(true)[name]; }

wt::wan::ProjectionReport project(WanModel& teacher, WanModel& student) {
  wt::wan::check_projectable(teacher->config(), "teacher", student->config(), "student");
  return wt::wan::project_weights(named(teacher), teacher->config(), named(student), student->config());
}

struct Inputs {
  at::Tensor x, t, context;
};
Inputs inputs(const WanConfig& c, int64_t frames) {
  torch::manual_seed(5);
  return {torch::randn({2, c.in_dim, frames, 4, 6}), torch::tensor({120.0f, 870.0f}), torch::randn({2, 3, c.text_dim})};
}

std::string temp_path(const std::string& name) { return (fs::path(::testing::TempDir()) / name).string(); }

}  // namespace

TEST(Projection, TeacherBlocksAreSpreadEvenlyKeepingFirstAndLast) {
  using wt::wan::teacher_block_for;
  // round(i * (Lt - 1) / (Ls - 1))
  EXPECT_EQ((std::vector<int64_t>{teacher_block_for(0, 3, 5), teacher_block_for(1, 3, 5), teacher_block_for(2, 3, 5)}),
            (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(teacher_block_for(1, 2, 4), 3);
  EXPECT_EQ(teacher_block_for(0, 1, 30), 0);
  // Wan 2.1 1.3B (30 blocks) to 15: 29/14 = 2.07 per step.
  for (int64_t i = 0; i < 15; ++i)
    EXPECT_EQ(teacher_block_for(i, 15, 30), int64_t(std::floor(double(i) * 29.0 / 14.0 + 0.5))) << i;
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(teacher_block_for(i, 4, 4), i);  // the same depth: block i <- block i
}

TEST(Projection, AStudentOfTheTeachersShapeReproducesItExactly) {
  const auto c = config(32, 2);
  auto teacher = random_model(c, 1);
  torch::manual_seed(2);
  WanModel student(c);
  const auto report = project(teacher, student);
  EXPECT_EQ(report.count(Projection::Copied), int64_t(report.tensors.size()));
  const auto in = inputs(c, 2);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(student->forward(in.x, in.t, in.context), teacher->forward(in.x, in.t, in.context)));
}

TEST(Projection, ASmallerStudentTakesLeadingRowsAndColumnsAndSpreadBlocks) {
  const auto tc = config(32, 3), sc = config(16, 2);
  auto teacher = random_model(tc, 1);
  WanModel student(sc);
  const auto report = project(teacher, student);
  EXPECT_EQ(report.block_map, (std::vector<int64_t>{0, 2}));
  using torch::indexing::Slice;
  // Student block 1 is teacher block 2, sliced to the leading 16 rows/columns.
  EXPECT_TRUE(torch::equal(parameter(student, "blocks.1.self_attn.q.weight"),
                           parameter(teacher, "blocks.2.self_attn.q.weight").index({Slice(0, 16), Slice(0, 16)})));
  EXPECT_TRUE(torch::equal(parameter(student, "blocks.1.ffn.0.weight"),
                           parameter(teacher, "blocks.2.ffn.0.weight").index({Slice(0, 32), Slice(0, 16)})));
  EXPECT_TRUE(torch::equal(parameter(student, "blocks.0.modulation"),
                           parameter(teacher, "blocks.0.modulation").index({Slice(), Slice(), Slice(0, 16)})));
  // time_projection.1 stacks six chunks of dim rows: chunk k's row r is row k*dim + r.
  const auto s = parameter(student, "time_projection.1.weight"), t = parameter(teacher, "time_projection.1.weight");
  for (int64_t k = 0; k < 6; ++k)
    EXPECT_TRUE(
        torch::equal(s.index({Slice(k * 16, k * 16 + 16)}), t.index({Slice(k * 32, k * 32 + 16), Slice(0, 16)})))
        << "chunk " << k;
  const auto sb = parameter(student, "time_projection.1.bias"), tb = parameter(teacher, "time_projection.1.bias");
  EXPECT_TRUE(torch::equal(sb.index({Slice(80, 96)}), tb.index({Slice(160, 176)})));
  // Text and time embeddings' input widths are the teacher's: only rows are sliced.
  EXPECT_TRUE(torch::equal(parameter(student, "time_embedding.0.weight"),
                           parameter(teacher, "time_embedding.0.weight").index({Slice(0, 16)})));
  EXPECT_EQ(report.count(Projection::Fresh), 0);
  EXPECT_EQ(report.count(Projection::Summed), 0);
  EXPECT_GT(report.count(Projection::Sliced), 0);
  const auto text = report.describe();
  EXPECT_NE(text.find("blocks (student<-teacher): 0<-0 1<-2"), std::string::npos) << text;
  EXPECT_NE(text.find("blocks.*.self_attn.q.weight x 2  [32,32] -> [16,16]"), std::string::npos) << text;
}

TEST(Projection, AnImageStudentOfAVideoTeacherSeesAnImageAsAStillVideo) {
  // Teacher with temporal patch 2, student with 1, otherwise alike. The
  // summed kernel embeds an image as the teacher embeds that image repeated
  // over 2 frames, so every token is the same; the head's rows are the mean
  // of the teacher's 2 frames. Hence student(image) = mean over frames of
  // teacher(still video).
  const auto tc = config(32, 2, {2, 2, 2}), sc = config(32, 2, {1, 2, 2});
  auto teacher = random_model(tc, 3);
  WanModel student(sc);
  const auto report = project(teacher, student);
  EXPECT_EQ(report.count(Projection::Summed), 3);  // patch_embedding.weight, head.head.weight and .bias
  const auto in = inputs(sc, 1);
  torch::NoGradGuard no_grad;
  const auto still_video = in.x.expand({-1, -1, 2, -1, -1});
  const auto expected = teacher->forward(still_video, in.t, in.context).mean(2, /*keepdim=*/true);
  const auto got = student->forward(in.x, in.t, in.context);
  EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-5)) << (got - expected).abs().max().item<double>();
}

TEST(Teacher, ShowsAnImageStudentsFramesAsStillsAndTheProjectedStudentMatchesIt) {
  // The run-time half of the rule above: a video teacher (temporal patch 2)
  // sees each frame of single-frame data as a still and averages its
  // output frames, so a projected student of its widths predicts what it does.
  const auto tc = config(32, 2, {2, 2, 2}), sc = config(32, 2, {1, 2, 2});
  auto source = random_model(tc, 3);
  const auto path = temp_path("teacher-video.safetensors");
  wt::wan::save_weights(*source, path);
  wt::wan::Teacher teacher(path, tc, "test");
  teacher.show_frames_as_stills(true);
  WanModel student(sc);
  wt::wan::project_weights(teacher.weights(), tc, named(student), sc);
  const auto in = inputs(sc, 1);
  torch::NoGradGuard no_grad;
  const auto from_teacher = teacher.predict(in.x, in.t, in.context, at::kFloat);
  EXPECT_EQ(from_teacher.sizes(), in.x.sizes());
  const auto expected = source->forward(in.x.expand({-1, -1, 2, -1, -1}), in.t, in.context).mean(2, true);
  EXPECT_TRUE(torch::equal(from_teacher, expected));
  const auto got = student->forward(in.x, in.t, in.context);
  EXPECT_TRUE(torch::allclose(got, from_teacher, 1e-4, 1e-5)) << (got - from_teacher).abs().max().item<double>();
}

TEST(Projection, ParametersTheTeacherLacksKeepTheirFreshInit) {
  auto tc = config(32, 1), sc = config(32, 1);
  tc.qk_norm = false;
  auto teacher = random_model(tc, 4);
  WanModel student(sc);
  const auto before = parameter(student, "blocks.0.self_attn.norm_q.weight").clone();
  const auto report = project(teacher, student);
  EXPECT_EQ(report.count(Projection::Fresh), 4);  // norm_q and norm_k of self- and cross-attention
  EXPECT_TRUE(torch::equal(parameter(student, "blocks.0.self_attn.norm_q.weight"), before));
}

TEST(Projection, StudentsThatCannotBeProjectedAreOneLineNamingTheField) {
  auto error = [](const WanConfig& teacher, const WanConfig& student) {
    try {
      wt::wan::check_projectable(teacher, "--teacher t.safetensors", student, "--model-config s.json");
    } catch (const wt::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("projectable");
  };
  const auto t = config(32, 2);
  auto wider = config(64, 2), deeper = config(32, 3), other_latents = config(32, 2), video = config(32, 2, {2, 2, 2});
  other_latents.in_dim = 8;
  EXPECT_EQ(error(t, wider),
            "student_init: projection: student --model-config s.json has dim 64, teacher --teacher t.safetensors has "
            "32: a student may be smaller than its teacher, not larger (or start it at random)");
  EXPECT_NE(error(t, deeper).find("has num_layers 3, teacher --teacher t.safetensors has 2"), std::string::npos);
  EXPECT_NE(error(t, other_latents)
                .find("has in_dim 8, teacher --teacher t.safetensors has 4: both must read the "
                      "same latents"),
            std::string::npos);
  EXPECT_NE(error(t, video).find("the temporal patch must be the teacher's, or 1 for an image student"),
            std::string::npos);
  EXPECT_EQ(error(t, config(16, 1)), "projectable");
}

TEST(DistillationLoss, IsTheMeanSquaredGapToTheTeacherPlusTheWeightedTarget) {
  const auto student = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f});
  const auto teacher = torch::tensor({1.0f, 0.0f, 3.0f, 2.0f});  // gaps 0, 2, 0, 2: mean square 2
  const auto target = torch::tensor({0.0f, 2.0f, 3.0f, 4.0f});   // gaps 1, 0, 0, 0: mean square 0.25
  EXPECT_DOUBLE_EQ(wt::wan::distillation_loss(student, teacher, target, 0.0).item<double>(), 2.0);
  EXPECT_DOUBLE_EQ(wt::wan::distillation_loss(student, teacher, target, 0.5).item<double>(), 2.125);
}

TEST(Teacher, IsFrozenAndItsChecksumFollowsTheWeightsNotTheFile) {
  const auto c = config(32, 2);
  auto source = random_model(c, 6);
  const auto official = temp_path("teacher-official.safetensors"),
             diffusers = temp_path("teacher-diffusers.safetensors");
  wt::wan::save_weights(*source, official);
  wt::wan::save_weights(*source, diffusers, at::kFloat, wt::wan::WeightNames::Diffusers);
  const wt::wan::Teacher a(official, c, "test"), b(diffusers, c, "test");
  EXPECT_EQ(a.checksum(), b.checksum());
  EXPECT_EQ(a.checksum().rfind("crc32:", 0), 0u);
  for (const auto& [name, weight] : a.weights()) EXPECT_FALSE(weight.requires_grad()) << name;
  const auto in = inputs(c, 2);
  at::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected = source->forward(in.x, in.t, in.context);
  }
  EXPECT_TRUE(torch::equal(a.predict(in.x, in.t, in.context, at::kFloat), expected));

  {  // one weight changed: another checksum
    torch::NoGradGuard no_grad;
    parameter(source, "blocks.1.ffn.2.bias")[0] += 1e-3;
  }
  const auto changed = temp_path("teacher-changed.safetensors");
  wt::wan::save_weights(*source, changed);
  EXPECT_NE(wt::wan::Teacher(changed, c, "test").checksum(), a.checksum());
}

TEST(Teacher, HeldInBf16PredictsWithinBf16Precision) {
  const auto c = config(32, 2);
  const auto path = temp_path("teacher-bf16.safetensors");
  wt::wan::save_weights(*random_model(c, 7), path);
  wt::wan::Teacher fp32(path, c, "test"), bf16(path, c, "test", at::kBFloat16);
  // The same weights as read: the same teacher for a resume's check.
  EXPECT_EQ(bf16.checksum(), fp32.checksum());
  EXPECT_TRUE(bf16.held_in_bf16());
  for (const auto& [name, w] : bf16.weights()) {
    EXPECT_EQ(w.scalar_type(), wt::wan::held_in_bf16_by_teacher(name) ? at::kBFloat16 : at::kFloat) << name;
    const bool large_linear = name.find(".ffn.") != std::string::npos || name.find("_attn.q.") != std::string::npos;
    const bool fp32_by_design = name.find("norm") != std::string::npos ||
                                name.find("modulation") != std::string::npos || name.rfind("time_", 0) == 0 ||
                                name.rfind("head.", 0) == 0;
    if (large_linear) {
      EXPECT_EQ(w.scalar_type(), at::kBFloat16) << name;
    }
    if (fp32_by_design) {
      EXPECT_EQ(w.scalar_type(), at::kFloat) << name;
    }
  }
  const auto in = inputs(c, 2);
  const auto a = fp32.predict(in.x, in.t, in.context, at::kFloat), b = bf16.predict(in.x, in.t, in.context, at::kFloat);
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  const double relative = ((a - b).norm() / a.norm()).item<double>();
  EXPECT_GT(relative, 0.0);   // bf16 did round
  EXPECT_LT(relative, 3e-2);  // at bf16's precision (8 mantissa bits, through 2 blocks)
}

// A bf16 teacher is loaded into its final precision one tensor at a time:
// the tensors alive at once never exceed the bf16 model plus one tensor as
// stored and its fp32 copy for the checksum (derived from the shapes).
TEST(Teacher, LoadsInBf16WithoutAnFp32CopyOfTheModel) {
  const auto c = config(64, 4);
  const auto path = temp_path("teacher-memory.safetensors");
  wt::wan::save_weights(*random_model(c, 12), path);  // stored fp32
  int64_t held = 0, largest = 0;
  const auto file = wt::io::SafetensorsFile::open(path);
  for (const auto& entry : file.entries()) {
    const int64_t n = wt::wan::element_count(entry.shape);
    held += n * (wt::wan::held_in_bf16_by_teacher(entry.name) ? 2 : 4);
    largest = std::max(largest, n * 4);
  }
  wt::nn::count_tensor_memory();
  const int64_t before = wt::nn::live_tensor_bytes();
  wt::nn::reset_peak_tensor_bytes();
  {
    const wt::wan::Teacher teacher(path, c, "test", at::kBFloat16);
    const int64_t kept = wt::nn::live_tensor_bytes() - before;  // its parameters, and buffers (RoPE)
    EXPECT_GE(kept, held);
    EXPECT_LE(kept, held + largest);
    EXPECT_LE(wt::nn::peak_tensor_bytes() - before, kept + 2 * largest);
    // An fp32 copy of the whole model would have been more than that.
    int64_t fp32 = 0;
    for (const auto& [name, w] : teacher.weights()) fp32 += w.numel() * 4;
    EXPECT_GT(fp32, held + 2 * largest);
  }
}

TEST(Teacher, PredictsTheSameInAttentionChunks) {
  const auto c = config(32, 2);
  const auto path = temp_path("teacher-chunked.safetensors");
  wt::wan::save_weights(*random_model(c, 7), path);
  wt::wan::Teacher teacher(path, c, "test");
  const auto in = inputs(c, 2);
  const auto whole = teacher.predict(in.x, in.t, in.context, at::kFloat);
  teacher.set_attention_chunk(5);  // 12 tokens: chunks of 5, 5 and 2
  // The chunks' softmax sums in another order: fp32 rounding of the
  // output's scale (3e-7 of it measured), not of each element's.
  const auto chunked = teacher.predict(in.x, in.t, in.context, at::kFloat);
  EXPECT_LT((chunked - whole).abs().max().item<double>(), 1e-5 * whole.abs().max().item<double>());
}

TEST(Teacher, ACheckpointTeacherGivesItsEmaWeightsAndItsOwnConfig) {
  const auto c = config(32, 1);
  const auto model = random_model(c, 8), ema = random_model(c, 9);
  wt::ckpt::Checkpoint saved;
  for (const auto& [name, w] : named(model)) saved.model.emplace_back(name, w.detach().clone());
  for (const auto& [name, w] : named(ema)) saved.ema.emplace_back(name, w.detach().clone());
  saved.model_config = wt::wan::to_json(c);
  saved.run_config = "{}";
  saved.state.step = 12;
  const auto path = temp_path("teacher-checkpoint.h5");
  wt::ckpt::write_checkpoint(path, saved);

  const auto resolved = wt::wan::resolve_teacher_config(path, "");
  EXPECT_EQ(wt::wan::to_json(resolved), wt::wan::to_json(c));
  const wt::wan::Teacher teacher(path, resolved, "stored");
  EXPECT_EQ(teacher.source(), "EMA weights of checkpoint step 12");
  for (const auto& [name, w] : teacher.weights()) EXPECT_TRUE(torch::equal(w, parameter(ema, name))) << name;
}

TEST(Teacher, BadTeacherFilesAreOneLineNamingTheOption) {
  const auto c = config(32, 2);
  const auto path = temp_path("teacher-good.safetensors");
  wt::wan::save_weights(*random_model(c, 10), path);
  auto error = [&](const std::string& file, const WanConfig& cfg) {
    try {
      wt::wan::Teacher(file, cfg, "--teacher-config t.json");
    } catch (const wt::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  // A config with another depth: the file's extra block is named.
  const auto shallower = error(path, config(32, 1));
  EXPECT_EQ(shallower.rfind("teacher: weights " + path + ": do not match the model: ", 0), 0u) << shallower;
  EXPECT_NE(shallower.find("unexpected (blocks.1."), std::string::npos) << shallower;
  EXPECT_NE(shallower.find("(the teacher's config --teacher-config t.json: dim 32, 1 layers)"), std::string::npos);
  // Another width: shapes named.
  EXPECT_NE(error(path, config(16, 2))
                .find("of another shape (patch_embedding.weight: file [32,4,1,2,2] vs model "
                      "[16,4,1,2,2]"),
            std::string::npos);
  // A missing tensor.
  {
    auto tensors = wt::io::SafetensorsFile::open(path);
    NamedTensors kept;
    for (const auto& entry : tensors.entries())
      if (entry.name != "head.head.bias") kept.emplace_back(entry.name, tensors.read(entry));
    wt::io::write_safetensors(temp_path("teacher-missing.safetensors"), kept, at::kFloat);
  }
  EXPECT_NE(error(temp_path("teacher-missing.safetensors"), c).find("1 missing (head.head.bias)"), std::string::npos);
  // A truncated file.
  fs::copy_file(path, temp_path("teacher-truncated.safetensors"), fs::copy_options::overwrite_existing);
  fs::resize_file(temp_path("teacher-truncated.safetensors"), fs::file_size(path) / 2);
  EXPECT_EQ(error(temp_path("teacher-truncated.safetensors"), c).rfind("teacher: ", 0), 0u);
  // Neither a config nor a checkpoint to take one from.
  try {
    wt::wan::resolve_teacher_config(path, "");
    ADD_FAILURE() << "no error";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("teacher_config: the teacher " + path + " is not a wantrain checkpoint", 0),
              0u)
        << e.what();
  }
}
