// safetensors in and out: round trips in each dtype, diffusers names, sharded
// indexes, strict loading, and crafted bad files that must each give one
// clear error (never a crash or an out-of-bounds read).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/util/error.hpp"

namespace fs = std::filesystem;
using wt::wan::WanConfig;

namespace {

WanConfig tiny_wan_config() {
  WanConfig c;
  c.dim = 32;
  c.ffn_dim = 64;
  c.num_heads = 2;
  c.num_layers = 2;
  c.freq_dim = 16;
  c.text_dim = 8;
  c.text_len = 4;
  c.patch_size = {1, 2, 2};
  c.in_dim = 4;
  c.out_dim = 4;
  return c;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("wantrain-safetensors-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file of an 8-byte length, `header` and `data_bytes` zero bytes.
  std::string craft(const std::string& name, const std::string& header, size_t data_bytes, uint64_t length_field) {
    std::ofstream out(path(name), std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length_field >> (8 * i)) & 0xff));
    out << header << std::string(data_bytes, '\0');
    return path(name);
  }
  std::string craft(const std::string& name, const std::string& header, size_t data_bytes) {
    return craft(name, header, data_bytes, header.size());
  }

  fs::path dir_;
};

std::string open_error(const std::string& file) {
  try {
    const auto f = wt::io::SafetensorsFile::open(file);
    for (const auto& e : f.entries()) f.read(e);
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_same_parameters(torch::nn::Module& a, torch::nn::Module& b, double tolerance) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i].value(), pb[i].value(), tolerance, tolerance)) << pa[i].key();
}

}  // namespace

TEST_F(Safetensors, RoundTripInEachDtype) {
  torch::manual_seed(1);
  wt::wan::WanModel source(tiny_wan_config());
  for (auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const std::string file = path("model.safetensors");
    wt::wan::save_weights(*source, file, dtype);
    torch::manual_seed(2);
    wt::wan::WanModel target(tiny_wan_config());
    const auto report = wt::wan::load_weights(*target, file);
    EXPECT_TRUE(report.complete());
    EXPECT_EQ(report.loaded.size(), source->parameters().size());
    // Loaded values are exactly the source values rounded to the file's dtype.
    const auto ps = source->named_parameters(), pt = target->named_parameters();
    for (size_t i = 0; i < ps.size(); ++i)
      EXPECT_TRUE(torch::equal(pt[i].value(), ps[i].value().to(dtype).to(torch::kFloat32))) << ps[i].key();
    const auto header = wt::io::SafetensorsFile::open(file);
    EXPECT_EQ(wt::io::scalar_type(header.entries().front().dtype), dtype);
    EXPECT_EQ(header.metadata().at("format"), "pt");
  }
}

TEST_F(Safetensors, DiffusersNamesMapBothWays) {
  const std::pair<const char*, const char*> pairs[] = {
      {"time_embedding.0.weight", "condition_embedder.time_embedder.linear_1.weight"},
      {"time_embedding.2.bias", "condition_embedder.time_embedder.linear_2.bias"},
      {"text_embedding.0.weight", "condition_embedder.text_embedder.linear_1.weight"},
      {"text_embedding.2.weight", "condition_embedder.text_embedder.linear_2.weight"},
      {"time_projection.1.weight", "condition_embedder.time_proj.weight"},
      {"head.head.weight", "proj_out.weight"},
      {"head.modulation", "scale_shift_table"},
      {"blocks.12.modulation", "blocks.12.scale_shift_table"},
      {"blocks.0.ffn.0.weight", "blocks.0.ffn.net.0.proj.weight"},
      {"blocks.0.ffn.2.bias", "blocks.0.ffn.net.2.bias"},
      {"blocks.3.self_attn.q.weight", "blocks.3.attn1.to_q.weight"},
      {"blocks.3.self_attn.o.bias", "blocks.3.attn1.to_out.0.bias"},
      {"blocks.3.self_attn.norm_k.weight", "blocks.3.attn1.norm_k.weight"},
      {"blocks.3.cross_attn.v.weight", "blocks.3.attn2.to_v.weight"},
      {"blocks.3.cross_attn.norm_q.weight", "blocks.3.attn2.norm_q.weight"},
      {"blocks.29.norm3.weight", "blocks.29.norm2.weight"},
      {"patch_embedding.weight", "patch_embedding.weight"},
      // Wan2.1 I2V/FLF2V's image branch (diffusers' WanImageEmbedding, add_k_proj)
      {"img_emb.proj.0.weight", "condition_embedder.image_embedder.norm1.weight"},
      {"img_emb.proj.1.bias", "condition_embedder.image_embedder.ff.net.0.proj.bias"},
      {"img_emb.proj.3.weight", "condition_embedder.image_embedder.ff.net.2.weight"},
      {"img_emb.proj.4.bias", "condition_embedder.image_embedder.norm2.bias"},
      {"img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"},
      {"blocks.7.cross_attn.k_img.weight", "blocks.7.attn2.add_k_proj.weight"},
      {"blocks.7.cross_attn.v_img.bias", "blocks.7.attn2.add_v_proj.bias"},
      {"blocks.7.cross_attn.norm_k_img.weight", "blocks.7.attn2.norm_added_k.weight"},
  };
  for (const auto& [official, diffusers] : pairs) {
    EXPECT_EQ(wt::wan::diffusers_name(official), diffusers);
    EXPECT_EQ(wt::wan::official_name(diffusers), official);
  }
  auto flf2v = tiny_wan_config();
  flf2v.model_type = wt::wan::ModelType::FLF2V;
  flf2v.image_dim = 8;
  flf2v.in_dim = 2 * flf2v.out_dim + 4;
  for (const auto& config : {tiny_wan_config(), flf2v})
    for (const auto& [name, shape] : wt::wan::parameter_shapes(config))
      EXPECT_EQ(wt::wan::official_name(wt::wan::diffusers_name(name)), name);
}

TEST_F(Safetensors, LoadsByDiffusersNames) {
  torch::manual_seed(3);
  wt::wan::WanModel source(tiny_wan_config());
  const std::string file = path("diffusers.safetensors");
  wt::wan::save_weights(*source, file, torch::kFloat32, wt::wan::WeightNames::Diffusers);
  const auto header = wt::io::SafetensorsFile::open(file);
  EXPECT_NE(header.find("condition_embedder.time_proj.weight"), nullptr);
  EXPECT_NE(header.find("blocks.1.attn2.to_out.0.weight"), nullptr);
  EXPECT_EQ(header.find("head.head.weight"), nullptr);
  torch::manual_seed(4);
  wt::wan::WanModel target(tiny_wan_config());
  const auto report = wt::wan::load_weights(*target, file);
  EXPECT_TRUE(report.diffusers_names);
  expect_same_parameters(*source, *target, 0);
}

TEST_F(Safetensors, LoadsAModelSplitByAnIndex) {
  torch::manual_seed(5);
  wt::wan::WanModel source(tiny_wan_config());
  wt::io::NamedTensors first, second;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& item : source->named_parameters()) {
    const bool in_first = item.key().rfind("blocks.1.", 0) != 0;
    (in_first ? first : second).emplace_back(item.key(), item.value());
    index["weight_map"][item.key()] =
        in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  wt::io::write_safetensors(path("model-00001-of-00002.safetensors"), first, torch::kBFloat16);
  wt::io::write_safetensors(path("model-00002-of-00002.safetensors"), second, torch::kBFloat16);
  std::ofstream(path("model.safetensors.index.json")) << index.dump(2);
  torch::manual_seed(6);
  wt::wan::WanModel target(tiny_wan_config());
  EXPECT_TRUE(wt::wan::load_weights(*target, path("model.safetensors.index.json")).complete());
  expect_same_parameters(*source, *target, 1e-2);

  index["weight_map"]["blocks.1.ffn.0.weight"] = "model-00003-of-00002.safetensors";
  std::ofstream(path("bad.safetensors.index.json")) << index.dump(2);
  EXPECT_THROW(
      {
        try {
          wt::wan::load_weights(*target, path("bad.safetensors.index.json"));
        } catch (const wt::UsageError& e) {
          EXPECT_NE(std::string(e.what()).find("model-00003-of-00002.safetensors that it names does not exist"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      wt::UsageError);
}

TEST_F(Safetensors, StrictLoadNamesMissingUnexpectedAndMismatchedTensorsAndChangesNothing) {
  torch::manual_seed(7);
  wt::wan::WanModel source(tiny_wan_config());
  wt::io::NamedTensors tensors;
  for (const auto& item : source->named_parameters()) {
    if (item.key() == "blocks.0.modulation") continue;  // missing
    auto value = item.value();
    if (item.key() == "blocks.1.ffn.0.weight") value = torch::zeros({3, 3});  // wrong shape
    tensors.emplace_back(item.key(), value);
  }
  tensors.emplace_back("blocks.0.extra.weight", torch::zeros({2}));  // unexpected
  const std::string file = path("partial.safetensors");
  wt::io::write_safetensors(file, tensors, torch::kFloat32);

  torch::manual_seed(8);
  wt::wan::WanModel target(tiny_wan_config());
  const auto before = target->parameters()[0].clone();
  try {
    wt::wan::load_weights(*target, file);
    FAIL() << "strict load accepted a mismatched file";
  } catch (const wt::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1 missing (blocks.0.modulation)"), std::string::npos) << what;
    EXPECT_NE(what.find("1 unexpected (blocks.0.extra.weight)"), std::string::npos) << what;
    EXPECT_NE(what.find("blocks.1.ffn.0.weight: file [3,3] vs model [64,32]"), std::string::npos) << what;
  }
  EXPECT_TRUE(torch::equal(target->parameters()[0], before));

  const auto report = wt::wan::load_weights(*target, file, wt::wan::LoadMode::Lenient);
  EXPECT_EQ(report.missing, std::vector<std::string>{"blocks.0.modulation"});
  EXPECT_EQ(report.loaded.size(), source->parameters().size() - 2);
  EXPECT_TRUE(torch::equal(target->parameters()[0], source->parameters()[0]));
}

TEST_F(Safetensors, CraftedBadFilesEachGiveOneClearError) {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(open_error(craft("good.safetensors", good, 8)), "(no error)");
  struct Case {
    std::string name, header;
    size_t data;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"bad-json", R"({"a":{"dtype":"F32",)", 8, "the header is not valid JSON"},
      {"not-object", R"(["a"])", 0, "the header is not a JSON object"},
      {"dtype", R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8, "tensor 'a': dtype \"I64\" is not one"},
      {"no-shape", R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8, "tensor 'a': header entry has no 'shape'"},
      {"negative", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
       "holds something other than non-negative"},
      {"backwards", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, "end before they begin"},
      {"byte-count", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "hold 8 bytes but F32 [3] needs 12"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlaps"},
      {"hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
       "bytes [0, 4) before tensor 'a' belong to no tensor"},
      {"past-end", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "runs past the 8 bytes of data (truncated?)"},
      {"trailing", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "4 bytes after the last tensor"},
      {"huge-shape", R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})",
       8, "is too large"},
      {"duplicate",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "tensor 'a' appears twice"},
      {"metadata", R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8,
       "__metadata__ 'format' is not a string"},
      // Deep nesting where an error message would print the value: refused
      // by the parser's depth limit, never a stack overflow.
      {"deep",
       R"({"a":{"dtype":"F32","shape":)" + std::string(200000, '[') + std::string(200000, ']') +
           R"(,"data_offsets":[0,8]}})",
       8, "nested deeper than 32 levels"},
      {"long-shape", R"({"a":{"dtype":"F32","shape":[)" + std::string(100000, '1') + R"(],"data_offsets":[0,8]}})", 8,
       "not valid JSON"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string error = open_error(craft(c.name + ".safetensors", c.header, c.data));
    EXPECT_EQ(error.rfind("safetensors " + path(c.name + ".safetensors") + ": ", 0), 0u) << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
    EXPECT_LT(error.size(), 400u) << error;  // one readable line, whatever the file holds
  }
  EXPECT_NE(open_error(craft("long.safetensors", good, 8, 1'000'000)).find("runs past the end"), std::string::npos);
  EXPECT_NE(open_error(craft("huge.safetensors", good, 8, ~0ull)).find("over the 100 MB limit"), std::string::npos);
  std::ofstream(path("short.safetensors")) << "abc";
  EXPECT_NE(open_error(path("short.safetensors")).find("3 bytes is too short"), std::string::npos);
  EXPECT_NE(open_error(path("absent.safetensors")).find("no such file"), std::string::npos);
}

// Every single-byte corruption and every truncation of a real file opens and
// reads cleanly or is refused with a UsageError: never a crash, never another
// exception type.
TEST_F(Safetensors, CorruptedAndTruncatedFilesNeverCrash) {
  torch::manual_seed(9);
  wt::io::NamedTensors tensors = {
      {"w", torch::randn({3, 5})}, {"b", torch::randn({5})}, {"s", torch::randn({1, 2, 2})}};
  const std::string file = path("small.safetensors");
  wt::io::write_safetensors(file, tensors, torch::kBFloat16);
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937 random(42);
  const std::string mutated = path("mutated.safetensors");
  auto try_file = [&](const std::string& content) {
    std::ofstream(mutated, std::ios::binary | std::ios::trunc) << content;
    try {
      const auto f = wt::io::SafetensorsFile::open(mutated);
      for (const auto& e : f.entries()) EXPECT_EQ(f.read(e).numel() * 2, int64_t(e.end - e.begin));
    } catch (const wt::UsageError&) {
    }
  };
  for (size_t cut = 0; cut < bytes.size(); cut += 7) try_file(bytes.substr(0, cut));
  for (int trial = 0; trial < 400; ++trial) {
    std::string content = bytes;
    const size_t at = random() % std::min<size_t>(content.size(), 8 + 200);  // the length field and header
    content[at] = static_cast<char>(random() & 0xff);
    try_file(content);
  }
}
