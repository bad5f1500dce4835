// The shard format: what ShardWriter writes reads back; files written by
// h5py as docs/data-format.md shows are read; every bad input is one clear
// UsageError naming the file and the field.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "../common/shards.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/io/h5.hpp"
#include "wantrain/util/error.hpp"

namespace fs = std::filesystem;
using namespace wt;
using wt::testing::small_shape;

namespace {

std::string open_error(const std::string& directory) {
  try {
    data::Dataset::open(directory);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "opened without error";
}

// Replaces dataset `name` of shard `path` with an empty one of `dims`,
// chunked one row per chunk (nothing is allocated for its rows).
void replace_dataset(const std::string& path, const char* name, hid_t type, std::vector<hsize_t> dims,
                     const char* dtype_attribute = nullptr) {
  io::Lock lock(io::library_mutex());
  auto file = io::open_file(path, true);
  ASSERT_GE(H5Ldelete(file.get(), name, H5P_DEFAULT), 0);
  const io::Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  std::vector<hsize_t> chunk = dims;
  chunk[0] = 1;
  for (auto& c : chunk) c = std::min<hsize_t>(c, 1024);
  const io::Handle props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(props.get(), int(chunk.size()), chunk.data());
  const io::Handle d(H5Dcreate2(file.get(), name, type, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT), H5Dclose);
  ASSERT_TRUE(d);
  if (dtype_attribute) io::write_string_attribute(d.get(), "dtype", dtype_attribute);
}

class StoredDtypes : public ::testing::TestWithParam<std::tuple<data::Stored, data::Stored>> {};

}  // namespace

TEST_P(StoredDtypes, WrittenSamplesReadBackInTheirStoredDtype) {
  const auto [latent_dtype, text_dtype] = GetParam();
  const auto s = small_shape(latent_dtype, text_dtype);
  // One directory per parameter: CTest may run them side by side.
  const auto dir = wt::testing::fresh_directory(std::string("roundtrip-") + data::to_string(latent_dtype) + "-" +
                                                data::to_string(text_dtype));
  wt::testing::write_shard(dir + "/a.h5", s, 3, 10);
  wt::testing::write_shard(dir + "/b.h5", s, 4, 20);
  const auto dataset = data::Dataset::open(dir);
  ASSERT_EQ(dataset.size(), 7);
  EXPECT_EQ(dataset.shape(), s);
  data::SampleReader reader(dataset);
  auto latents = torch::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
  auto text = torch::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const int64_t seed = i < 3 ? 10 : 20, row = i < 3 ? i : i - 3;
    int32_t text_len = -1;
    reader.read(i, latents, text, text_len);
    // The stored value is the written one rounded to the stored dtype.
    EXPECT_TRUE(torch::equal(latents, wt::testing::expected_latents(s, seed, row).to(latents.scalar_type()))) << i;
    EXPECT_TRUE(torch::equal(text, wt::testing::expected_text(s, seed, row).to(text.scalar_type()))) << i;
    EXPECT_EQ(text_len, wt::testing::expected_text_len(s, row));
    EXPECT_EQ(reader.prompt(i), "sample " + std::to_string(seed + row));
  }
}

INSTANTIATE_TEST_SUITE_P(Format, StoredDtypes,
                         ::testing::Values(std::make_tuple(data::Stored::Float32, data::Stored::Float32),
                                           std::make_tuple(data::Stored::Float16, data::Stored::Float16),
                                           std::make_tuple(data::Stored::BFloat16, data::Stored::Float32)),
                         [](const auto& info) {
                           return std::string(data::to_string(std::get<0>(info.param))) + "_" +
                                  data::to_string(std::get<1>(info.param));
                         });

TEST(DataFormat, ShardWrittenByTheDocsH5pyExampleIsRead) {
  // Run the first ```python block of docs/data-format.md, as a user would.
  std::ifstream doc(std::string(WANTRAIN_SOURCE_DIR) + "/docs/data-format.md");
  std::stringstream doc_text;
  doc_text << doc.rdbuf();
  std::smatch m;
  const std::string md = doc_text.str();
  ASSERT_TRUE(std::regex_search(md, m, std::regex("```python\\n([\\s\\S]*?)```"))) << "no python block in the doc";
  const auto dir = wt::testing::fresh_directory("h5py-example");
  std::ofstream(dir + "/example.py") << m[1].str();
  const std::string command = "cd " + dir + " && " + WANTRAIN_PYTHON + " example.py 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  fs::remove(dir + "/example.py");

  const auto dataset = data::Dataset::open(dir);
  const auto& s = dataset.shape();
  // What the snippet wrote: N=4, [16,1,32,32] float16 latents, [16,64] float16 text.
  ASSERT_EQ(dataset.size(), 4);
  EXPECT_EQ(s.latents, data::Stored::Float16);
  EXPECT_EQ(s.text, data::Stored::Float16);
  EXPECT_EQ(s.latents_string(), "[N,16,1,32,32] float16");
  EXPECT_EQ(s.text_string(), "[N,16,64] float16");
  data::SampleReader reader(dataset);
  auto latents = torch::empty({16, 1, 32, 32}, torch::kHalf);
  auto text = torch::empty({16, 64}, torch::kHalf);
  const int32_t lengths[] = {3, 16, 7, 0};
  const char* prompts[] = {"a red ball", "a cat on a mat", "waves at night", ""};
  for (int64_t i = 0; i < 4; ++i) {
    int32_t text_len = -1;
    reader.read(i, latents, text, text_len);
    const auto want = (torch::arange(i * 16384, (i + 1) * 16384, torch::kFloat).remainder(97) / 97.0)
                          .view({16, 1, 32, 32})
                          .to(torch::kHalf);
    EXPECT_TRUE(torch::equal(latents, want)) << i;
    EXPECT_EQ(text_len, lengths[i]);
    EXPECT_TRUE(torch::all(text.narrow(0, 0, lengths[i]) == (i + 1) / 8.0).item<bool>());
    EXPECT_TRUE(torch::all(text.narrow(0, lengths[i], 16 - lengths[i]) == 0).item<bool>());
    EXPECT_EQ(reader.prompt(i), prompts[i]);
  }
}

TEST(DataFormat, MissingDirectoryIsNamed) {
  EXPECT_EQ(open_error("/nonexistent/data"), "data: /nonexistent/data does not exist");
}

TEST(DataFormat, DirectoryWithoutShardsIsNamed) {
  const auto dir = wt::testing::fresh_directory("empty");
  std::ofstream(dir + "/notes.txt") << "not a shard";
  EXPECT_EQ(open_error(dir), "data: " + dir + " holds no shards (*.h5)");
}

TEST(DataFormat, ShardMissingADatasetIsNamed) {
  const auto dir = wt::testing::fresh_directory("missing-dataset");
  wt::testing::write_shard(dir + "/a.h5", small_shape(), 2, 0);
  {
    io::Lock lock(io::library_mutex());
    auto file = io::open_file(dir + "/a.h5", /*writable=*/true);
    ASSERT_GE(H5Ldelete(file.get(), "text_len", H5P_DEFAULT), 0);
  }
  EXPECT_EQ(open_error(dir), "data: shard " + dir + "/a.h5: dataset /text_len is missing");
}

TEST(DataFormat, ShardsThatDisagreeNameBothAndTheirShapes) {
  const auto dir = wt::testing::fresh_directory("disagree");
  auto other = small_shape();
  other.text_dim = 9;
  wt::testing::write_shard(dir + "/000.h5", small_shape(), 2, 0);
  wt::testing::write_shard(dir + "/003.h5", other, 2, 0);
  const std::string tail = " (the shards of a dataset may differ only in the latents' frames, height and width)";
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/003.h5 has latents [N,4,2,3,5] float32, text_emb [N,6,9] "
                                 "float32 but shard " +
                                 dir + "/000.h5 has latents [N,4,2,3,5] float32, text_emb [N,6,8] float32" + tail);
  // Latent channels and stored dtypes must agree too.
  other = small_shape();
  other.channels = 3;
  wt::testing::write_shard(dir + "/003.h5", other, 2, 0);
  EXPECT_NE(open_error(dir).find("/003.h5 has latents [N,3,2,3,5] float32"), std::string::npos);
  other = small_shape(data::Stored::Float16);
  wt::testing::write_shard(dir + "/003.h5", other, 2, 0);
  EXPECT_NE(open_error(dir).find("/003.h5 has latents [N,4,2,3,5] float16"), std::string::npos);
}

// Buckets: shards of several latent shapes are one dataset; its buckets are
// ordered by (F, H, W), whatever the files are called, and each sample reads
// back at its own shape.
TEST(DataFormat, ShardsOfSeveralLatentShapesFormBucketsOrderedByShape) {
  const auto dir = wt::testing::fresh_directory("buckets");
  auto wide = small_shape(), still = small_shape();
  wide.width = 7;
  still.frames = 1;
  wt::testing::write_shard(dir + "/a.h5", wide, 3, 10);           // samples 0-2
  wt::testing::write_shard(dir + "/b.h5", small_shape(), 2, 20);  // 3-4
  wt::testing::write_shard(dir + "/c.h5", still, 4, 30);          // 5-8
  wt::testing::write_shard(dir + "/d.h5", wide, 1, 40);           // 9
  const auto dataset = data::Dataset::open(dir);
  ASSERT_EQ(dataset.size(), 10);
  ASSERT_EQ(dataset.buckets().size(), 3u);
  // (1,3,5) < (2,3,5) < (2,3,7)
  EXPECT_EQ(dataset.buckets()[0].name(), "1x3x5");
  EXPECT_EQ(dataset.buckets()[0].shards, (std::vector<size_t>{2}));
  EXPECT_EQ(dataset.buckets()[0].samples, 4);
  EXPECT_EQ(dataset.buckets()[1].name(), "2x3x5");
  EXPECT_EQ(dataset.buckets()[2].name(), "2x3x7");
  EXPECT_EQ(dataset.buckets()[2].shards, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(dataset.buckets()[2].samples, 4);
  EXPECT_EQ(dataset.largest_shape(), wide);
  EXPECT_EQ(dataset.describe_buckets(), "1x3x5 (4 samples), 2x3x5 (2 samples), 2x3x7 (4 samples)");
  const auto layout = dataset.layout();
  EXPECT_EQ(layout.shard_sizes, (std::vector<int64_t>{3, 2, 4, 1}));
  EXPECT_EQ(layout.shard_buckets, (std::vector<int>{2, 1, 0, 2}));
  // A tool that needs one shape says so, naming the buckets.
  try {
    (void)dataset.shape();
    ADD_FAILURE() << "shape() of a bucketed dataset";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "data: " + dir + " holds samples of 3 shapes (" + dataset.describe_buckets() +
                                         "); this needs a dataset of one");
  }
  data::SampleReader reader(dataset);
  for (const auto& [index, shape, seed, row] : {std::tuple{int64_t(1), wide, 10, 1},
                                                {int64_t(4), small_shape(), 20, 1},
                                                {int64_t(8), still, 30, 3},
                                                {int64_t(9), wide, 40, 0}}) {
    EXPECT_EQ(dataset.shape_of(index), shape);
    auto latents = torch::empty({shape.channels, shape.frames, shape.height, shape.width});
    auto text = torch::empty({shape.text_len, shape.text_dim});
    int32_t text_len = 0;
    reader.read(index, latents, text, text_len);
    EXPECT_TRUE(torch::equal(latents, wt::testing::expected_latents(shape, seed, row))) << index;
  }
  // Reading a sample into tensors of another bucket's shape is an error, not
  // a write past them, nor a scrambled read of the same count (H and W swapped).
  auto wrong = torch::empty({4, 1, 3, 5});
  auto swapped = torch::empty({4, 2, 5, 3});
  auto text = torch::empty({6, 8});
  int32_t text_len = 0;
  EXPECT_THROW(reader.read(0, wrong, text, text_len), wt::Error);
  EXPECT_THROW(reader.read(3, swapped, text, text_len), wt::Error);
}

// An empty shard makes no bucket: nothing to plan, validate or sample at its shape.
TEST(DataFormat, AnEmptyShardOfAnotherShapeMakesNoBucket) {
  const auto dir = wt::testing::fresh_directory("empty-bucket");
  auto other = small_shape();
  other.frames = 1;
  wt::testing::write_shard(dir + "/a.h5", small_shape(), 3, 0);
  wt::testing::write_shard(dir + "/b.h5", other, 0, 0);
  const auto dataset = data::Dataset::open(dir);
  ASSERT_EQ(dataset.buckets().size(), 1u);
  EXPECT_EQ(dataset.shape(), small_shape());
  EXPECT_EQ(dataset.buckets()[0].shards, (std::vector<size_t>{0}));
}

// Version 1 shards (before buckets) are still read; a future version is named.
TEST(DataFormat, VersionOneShardsAreReadAndUnknownVersionsNamed) {
  const auto dir = wt::testing::fresh_directory("versions");
  wt::testing::write_shard(dir + "/a.h5", small_shape(), 2, 0);
  const auto set_version = [&](long long version) {
    const wt::io::Handle file(H5Fopen((dir + "/a.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    const wt::io::Handle attribute(H5Aopen(file.get(), "version", H5P_DEFAULT), H5Aclose);
    ASSERT_GE(H5Awrite(attribute.get(), H5T_NATIVE_LLONG, &version), 0);
  };
  EXPECT_EQ(data::inspect_shard(dir + "/a.h5").version, data::kShardVersion);
  set_version(1);
  EXPECT_EQ(data::inspect_shard(dir + "/a.h5").version, 1);
  EXPECT_EQ(data::Dataset::open(dir).size(), 2);
  set_version(3);
  EXPECT_EQ(open_error(dir),
            "data: shard " + dir + "/a.h5: format version 3 is not supported (this wantrain reads versions 1 to 2)");
}

TEST(DataFormat, WrongNumberOfDimensionsIsNamed) {
  const auto dir = wt::testing::fresh_directory("ndims");
  wt::testing::write_shard(dir + "/a.h5", small_shape(), 2, 0);
  {
    io::Lock lock(io::library_mutex());
    auto file = io::open_file(dir + "/a.h5", true);
    ASSERT_GE(H5Ldelete(file.get(), "latents", H5P_DEFAULT), 0);
    const hsize_t dims[4] = {2, 4, 3, 5};
    const io::Handle space(H5Screate_simple(4, dims, nullptr), H5Sclose);
    const io::Handle d(
        H5Dcreate2(file.get(), "latents", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
    ASSERT_TRUE(d);
  }
  EXPECT_EQ(open_error(dir),
            "data: shard " + dir + "/a.h5: /latents has 4 dimensions [2,4,3,5], expected 5 [N,C,F,H,W]");
}

TEST(DataFormat, TextLenBeyondLIsNamedWithTheSample) {
  const auto dir = wt::testing::fresh_directory("text-len");
  const auto s = small_shape();
  {
    data::ShardWriter w(dir + "/a.h5", s, 2, false);
    w.write(0, wt::testing::expected_latents(s, 0, 0), wt::testing::expected_text(s, 0, 0), 2);
    w.write(1, wt::testing::expected_latents(s, 0, 1), wt::testing::expected_text(s, 0, 1), 7);  // L = 6
  }
  EXPECT_EQ(open_error(dir), "data: shard " + dir + "/a.h5: sample 1: text_len 7 is outside 0..L=6");
}

TEST(DataFormat, TruncatedAndCorruptFilesAreNamed) {
  const auto dir = wt::testing::fresh_directory("truncated");
  wt::testing::write_shard(dir + "/a.h5", small_shape(), 4, 0);
  fs::resize_file(dir + "/a.h5", fs::file_size(dir + "/a.h5") / 2);
  const std::string truncated = open_error(dir);
  EXPECT_TRUE(truncated.rfind("data: shard " + dir + "/a.h5: ", 0) == 0) << truncated;
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;

  const auto dir2 = wt::testing::fresh_directory("corrupt");
  std::ofstream(dir2 + "/a.h5") << std::string(4096, '\x5a');
  EXPECT_EQ(open_error(dir2), "data: shard " + dir2 + "/a.h5: not an HDF5 file, or truncated or corrupt");
}

TEST(DataFormat, MissingFormatAttributeIsNamed) {
  const auto dir = wt::testing::fresh_directory("no-format");
  {
    io::Lock lock(io::library_mutex());
    auto file = io::create_file(dir + "/a.h5");
  }
  EXPECT_EQ(open_error(dir),
            "data: shard " + dir + "/a.h5: root attribute format is missing or not \"wantrain-shard\"");
}

// Hostile shards are refused from their metadata, before any buffer is sized
// from it: a sample count no file of that size can hold, per-sample sizes
// past the caps, a signed type labelled bfloat16.
TEST(DataFormat, HostileShapesAndTypesAreRefusedBeforeAllocating) {
  const auto s = small_shape();  // latents [4,2,3,5], text [6,8]
  const hsize_t huge = hsize_t(1) << 40;
  {
    const auto dir = wt::testing::fresh_directory("huge-n");
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    replace_dataset(dir + "/a.h5", "latents", H5T_IEEE_F32LE, {huge, 4, 2, 3, 5});
    replace_dataset(dir + "/a.h5", "text_emb", H5T_IEEE_F32LE, {huge, 6, 8});
    replace_dataset(dir + "/a.h5", "text_len", H5T_STD_I32LE, {huge});
    const std::string error = open_error(dir);
    EXPECT_EQ(error.rfind("data: shard " + dir + "/a.h5: 1099511627776 samples cannot be stored in a file of ", 0), 0u)
        << error;
  }
  {
    const auto dir = wt::testing::fresh_directory("huge-dims");
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    replace_dataset(dir + "/a.h5", "latents", H5T_IEEE_F32LE, {2, 4, 2, hsize_t(1) << 21, 5});
    EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                   "/a.h5: /latents has shape [2,4,2,2097152,5]: each per-sample size must be in "
                                   "1..1048576");
  }
  {
    const auto dir = wt::testing::fresh_directory("huge-product");
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    replace_dataset(dir + "/a.h5", "text_emb", H5T_IEEE_F32LE, {2, 1 << 20, 1 << 20});
    EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                   "/a.h5: /text_emb has shape [2,1048576,1048576]: more than 4294967296 elements a "
                                   "sample");
  }
  {
    // Each size within its cap, their product past 2^64: refused, not wrapped around to a small count.
    const auto dir = wt::testing::fresh_directory("wrapping-product");
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    const hsize_t big = hsize_t(1) << 20;
    replace_dataset(dir + "/a.h5", "latents", H5T_IEEE_F32LE, {2, 16, big, big, big});
    EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                   "/a.h5: /latents has shape [2,16,1048576,1048576,1048576]: more than 4294967296 "
                                   "elements a sample");
  }
  {
    const auto dir = wt::testing::fresh_directory("signed-bf16");
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    replace_dataset(dir + "/a.h5", "latents", H5T_STD_I16LE, {2, 4, 2, 3, 5}, "bfloat16");
    EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                   "/a.h5: /latents has an unsupported element type (expected float32, float16, or "
                                   "uint16 with attribute dtype=\"bfloat16\")");
  }
}

// A shard replaced after the dataset was opened (more samples, other
// sizes) is named when the reader opens it, before a row is read into
// buffers sized from the dataset.
TEST(DataFormat, AShardChangedAfterOpeningIsNamedNotRead) {
  const auto s = small_shape();
  for (const std::string change : {"more-samples", "other-sizes"}) {
    SCOPED_TRACE(change);
    const auto dir = wt::testing::fresh_directory("changed-" + change);
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    const auto dataset = data::Dataset::open(dir);
    auto other = s;
    if (change == "other-sizes") other.height = 7;
    wt::testing::write_shard(dir + "/a.h5", other, change == "more-samples" ? 50 : 2, 0);
    data::SampleReader reader(dataset);
    auto latents = torch::empty({s.channels, s.frames, s.height, s.width});
    auto text = torch::empty({s.text_len, s.text_dim});
    int32_t length = 0;
    try {
      reader.read(0, latents, text, length);
      FAIL() << "a changed shard was read";
    } catch (const Error& e) {
      const std::string expected = change == "more-samples" ? "/latents is [50,4,2,3,5], it was [2,4,2,3,5]"
                                                            : "/latents is [2,4,2,7,5], it was [2,4,2,3,5]";
      EXPECT_NE(std::string(e.what()).find("shard " + dir + "/a.h5 changed after the run started: " + expected),
                std::string::npos)
          << e.what();
    }
  }
}
