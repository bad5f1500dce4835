// The shard format: what ShardWriter writes reads back; files written by
// h5py as docs/data-format.md shows are read; every bad input is one clear
// UsageError naming the file and the field.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "../../common/build_paths.hpp"
#include "../../common/shards.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/io/h5.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/util/error.hpp"

namespace fs = std::filesystem;
using namespace wt;
using wt::testing::conditioned_shape;
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
class ConditionedDtypes : public ::testing::TestWithParam<std::tuple<data::Stored, data::Stored>> {};

void set_version(const std::string& path, long long version) {
  io::Lock lock(io::library_mutex());
  const io::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  const io::Handle attribute(H5Aopen(file.get(), "version", H5P_DEFAULT), H5Aclose);
  ASSERT_GE(H5Awrite(attribute.get(), H5T_NATIVE_LLONG, &version), 0);
}

void delete_dataset(const std::string& path, const char* name) {
  io::Lock lock(io::library_mutex());
  auto file = io::open_file(path, /*writable=*/true);
  ASSERT_GE(H5Ldelete(file.get(), name, H5P_DEFAULT), 0);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

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
  EXPECT_EQ(data::inspect_shard(dir + "/a.h5").version, data::kUnconditionedShardVersion);
  set_version(dir + "/a.h5", 1);
  EXPECT_EQ(data::inspect_shard(dir + "/a.h5").version, 1);
  EXPECT_EQ(data::Dataset::open(dir).size(), 2);
  set_version(dir + "/a.h5", 3);  // a version-3 shard need not hold a condition
  EXPECT_EQ(data::Dataset::open(dir).size(), 2);
  set_version(dir + "/a.h5", 4);  // nor a version-4 one a VACE context
  EXPECT_EQ(data::Dataset::open(dir).size(), 2);
  set_version(dir + "/a.h5", 5);
  EXPECT_EQ(open_error(dir),
            "data: shard " + dir + "/a.h5: format version 5 is not supported (this wantrain reads versions 1 to 4)");
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

// Replaces /latents of shard `path` ([2,4,2,3,5] float32) by `make`'s link or dataset.
static void replace_latents(const std::string& path, const std::function<void(hid_t file)>& make) {
  io::Lock lock(io::library_mutex());
  auto file = io::open_file(path, /*writable=*/true);
  ASSERT_GE(H5Ldelete(file.get(), "latents", H5P_DEFAULT), 0);
  make(file.get());
}

// A shard whose /latents lie in another file (an external link, a virtual
// dataset over another file, external raw storage): one line, before
// anything is read, whatever the other file holds. Each of the three was
// read as the shard's own data before.
TEST(DataFormat, AShardWhoseDataLiesInAnotherFileIsRefused) {
  const auto s = small_shape();  // latents [4,2,3,5]
  std::vector<hsize_t> dims{2, 4, 2, 3, 5};
  const auto elsewhere = wt::testing::fresh_directory("elsewhere");
  wt::testing::write_shard(elsewhere + "/other.h5", s, 2, 1);
  std::ofstream(elsewhere + "/raw.bin", std::ios::binary) << std::string(2 * 4 * 2 * 3 * 5 * 4, '\x01');
  auto dataset = [&](hid_t file, hid_t create) {
    const io::Handle space(H5Screate_simple(5, dims.data(), nullptr), H5Sclose);
    const io::Handle set(H5Dcreate2(file, "latents", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, create, H5P_DEFAULT),
                         H5Dclose);
    ASSERT_TRUE(set);
  };
  const std::vector<std::pair<std::string, std::function<void(hid_t)>>> cases{
      {"latents: an external link to another file",
       [&](hid_t file) {
         ASSERT_GE(H5Lcreate_external((elsewhere + "/other.h5").c_str(), "/latents", file, "latents", H5P_DEFAULT,
                                      H5P_DEFAULT),
                   0);
       }},
      {"latents: a virtual dataset, its data drawn from other datasets",
       [&](hid_t file) {
         const io::Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
         const io::Handle space(H5Screate_simple(5, dims.data(), nullptr), H5Sclose);
         ASSERT_GE(
             H5Pset_virtual(create.get(), space.get(), (elsewhere + "/other.h5").c_str(), "/latents", space.get()), 0);
         dataset(file, create.get());
       }},
      {"latents: its data stored in external files", [&](hid_t file) {
         const io::Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
         ASSERT_GE(H5Pset_external(create.get(), (elsewhere + "/raw.bin").c_str(), 0, 2 * 4 * 2 * 3 * 5 * 4), 0);
         dataset(file, create.get());
       }}};
  for (const auto& [line, make] : cases) {
    const auto dir = wt::testing::fresh_directory("data-elsewhere");
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    replace_latents(dir + "/a.h5", make);
    const std::string error = open_error(dir);
    EXPECT_EQ(error.rfind("data: shard " + dir + "/a.h5: unreadable (" + line, 0), 0u) << error;
    EXPECT_NE(error.find("(wantrain reads only the data a file holds itself))"), std::string::npos) << error;
  }
}

// A shard replaced after the dataset was opened (more samples, other
// sizes) is named when the reader opens it, before a row is read into
// buffers sized from the dataset.
TEST(DataFormat, AShardChangedAfterOpeningIsNamedNotRead) {
  const auto s = small_shape();
  for (const std::string change : {"more-samples", "other-sizes", "condition-added"}) {
    SCOPED_TRACE(change);
    const auto dir = wt::testing::fresh_directory("changed-" + change);
    wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
    const auto dataset = data::Dataset::open(dir);
    auto other = s;
    if (change == "other-sizes") other.height = 7;
    if (change == "condition-added") other = wt::testing::conditioned_shape();
    wt::testing::write_shard(dir + "/a.h5", other, change == "more-samples" ? 50 : 2, 0);
    data::SampleReader reader(dataset);
    auto latents = torch::empty({s.channels, s.frames, s.height, s.width});
    auto text = torch::empty({s.text_len, s.text_dim});
    int32_t length = 0;
    try {
      reader.read(0, latents, text, length);
      FAIL() << "a changed shard was read";
    } catch (const Error& e) {
      const std::string expected = change == "more-samples"  ? "/latents is [50,4,2,3,5], it was [2,4,2,3,5]"
                                   : change == "other-sizes" ? "/latents is [2,4,2,7,5], it was [2,4,2,3,5]"
                                                             : "/y was added";
      EXPECT_NE(std::string(e.what()).find("shard " + dir + "/a.h5 changed after the run started: " + expected),
                std::string::npos)
          << e.what();
    }
  }
}

// The image-to-video condition (format version 3): /y and /clip_fea are
// written, read back in their stored dtypes beside the latents and text,
// and stored as those are.
TEST_P(ConditionedDtypes, ConditionedSamplesReadBackWithTheirCondition) {
  const auto [latent_dtype, text_dtype] = GetParam();
  const auto s = conditioned_shape(latent_dtype, text_dtype);
  const auto dir = wt::testing::fresh_directory(std::string("conditioned-") + data::to_string(latent_dtype) + "-" +
                                                data::to_string(text_dtype));
  wt::testing::write_shard(dir + "/a.h5", s, 3, 10);
  wt::testing::write_shard(dir + "/b.h5", s, 4, 20);
  const auto dataset = data::Dataset::open(dir);
  ASSERT_EQ(dataset.size(), 7);
  EXPECT_EQ(dataset.shape(), s);
  EXPECT_TRUE(dataset.shape().has_condition());
  for (const auto& shard : dataset.shards()) EXPECT_EQ(shard.version, 3);
  EXPECT_EQ(s.condition_string(), std::string("[N,6,2,3,5] ") + data::to_string(latent_dtype));
  EXPECT_EQ(s.clip_string(), std::string("[N,4,3] ") + data::to_string(text_dtype));
  EXPECT_EQ(s.condition_bytes(), 6 * 2 * 3 * 5 * (latent_dtype == data::Stored::Float32 ? 4 : 2) +
                                     4 * 3 * (text_dtype == data::Stored::Float32 ? 4 : 2));
  {
    io::Lock lock(io::library_mutex());
    const auto file = io::open_file(dir + "/a.h5");
    for (const auto& [name, stored] : {std::pair{"y", latent_dtype}, {"clip_fea", text_dtype}}) {
      const auto d = io::open_dataset(file.get(), name);
      EXPECT_EQ(io::has_attribute(d.get(), "dtype"), stored == data::Stored::BFloat16) << name;
    }
  }
  data::SampleReader reader(dataset);
  auto latents = torch::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
  auto text = torch::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
  data::SampleCondition condition{
      torch::empty({s.condition_channels, s.frames, s.height, s.width}, data::scalar_type(s.latents)),
      torch::empty({s.clip_tokens, s.clip_dim}, data::scalar_type(s.text))};
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const int64_t seed = i < 3 ? 10 : 20, row = i < 3 ? i : i - 3;
    int32_t text_len = -1;
    reader.read(i, latents, text, text_len, &condition);
    EXPECT_TRUE(torch::equal(latents, wt::testing::expected_latents(s, seed, row).to(latents.scalar_type()))) << i;
    EXPECT_TRUE(torch::equal(text, wt::testing::expected_text(s, seed, row).to(text.scalar_type()))) << i;
    EXPECT_TRUE(torch::equal(condition.y, wt::testing::expected_y(s, seed, row).to(condition.y.scalar_type()))) << i;
    EXPECT_TRUE(
        torch::equal(condition.clip_fea, wt::testing::expected_clip(s, seed, row).to(condition.clip_fea.scalar_type())))
        << i;
    EXPECT_EQ(text_len, wt::testing::expected_text_len(s, row));
    EXPECT_EQ(reader.prompt(i), "sample " + std::to_string(seed + row));
    // A caller that wants no condition reads the rest as before.
    auto again = torch::empty_like(latents);
    reader.read(i, again, text, text_len);
    EXPECT_TRUE(torch::equal(again, latents));
  }
  // Tensors that do not fit the condition are refused, naming the shard and sample.
  int32_t text_len = 0;
  data::SampleCondition wrong{
      torch::empty({s.condition_channels, s.frames + 1, s.height, s.width}, data::scalar_type(s.latents)), {}};
  try {
    reader.read(4, latents, text, text_len, &wrong);
    ADD_FAILURE() << "read into a y of another shape";
  } catch (const wt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data: sample 4 of shard " + dir + "/b.h5 has y [N,6,2,3,5]"),
              std::string::npos)
        << e.what();
  }
  // The writer takes the condition exactly when its shape has one.
  data::ShardWriter writer(dir + "/c.h5", s, 1, false);
  EXPECT_THROW(writer.write(0, wt::testing::expected_latents(s, 0, 0), wt::testing::expected_text(s, 0, 0), 1),
               wt::Error);
  auto no_clip = wt::testing::expected_condition(s, 0, 0);
  no_clip.clip_fea = at::Tensor();
  EXPECT_THROW(
      writer.write(0, wt::testing::expected_latents(s, 0, 0), wt::testing::expected_text(s, 0, 0), 1, "", no_clip),
      wt::Error);
  data::ShardWriter plain(dir + "/d.h5", small_shape(), 1, false);
  EXPECT_THROW(plain.write(0, wt::testing::expected_latents(s, 0, 0), wt::testing::expected_text(s, 0, 0), 1, "",
                           wt::testing::expected_condition(s, 0, 0)),
               wt::Error);
}

INSTANTIATE_TEST_SUITE_P(Format, ConditionedDtypes,
                         ::testing::Values(std::make_tuple(data::Stored::Float32, data::Stored::Float32),
                                           std::make_tuple(data::Stored::BFloat16, data::Stored::BFloat16)),
                         [](const auto& info) {
                           return std::string(data::to_string(std::get<0>(info.param))) + "_" +
                                  data::to_string(std::get<1>(info.param));
                         });

// A conditioned dataset in two buckets: every batch, random access or from
// the prefetching loader, holds "y" and "clip_fea" of its bucket's shape,
// converted as the latents and the text are.
TEST(DataFormat, ConditionedBucketsGiveBatchesWithTheCondition) {
  const auto dir = wt::testing::fresh_directory("conditioned-buckets");
  const auto clip = conditioned_shape(data::Stored::Float16, data::Stored::BFloat16);
  auto still = clip;
  still.frames = 1;
  wt::testing::write_shard(dir + "/a.h5", clip, 4, 10);   // samples 0-3, 2x3x5
  wt::testing::write_shard(dir + "/b.h5", still, 3, 20);  // 4-6, 1x3x5
  const auto dataset = data::Dataset::open(dir);
  ASSERT_EQ(dataset.buckets().size(), 2u);
  const auto source = [](int64_t i) {
    return i < 4 ? std::pair<int64_t, int64_t>{10, i} : std::pair{int64_t(20), i - 4};
  };

  train::ShardSamples samples(dataset);
  const auto random = samples.read({4, 6});
  ASSERT_EQ(random.tensors.count("y"), 1u);
  ASSERT_EQ(random.tensors.count("clip_fea"), 1u);
  EXPECT_EQ(random.tensors.at("y").sizes(), (at::IntArrayRef{2, 6, 1, 3, 5}));
  EXPECT_EQ(random.tensors.at("y").scalar_type(), at::kHalf);
  EXPECT_EQ(random.tensors.at("clip_fea").sizes(), (at::IntArrayRef{2, 4, 3}));
  EXPECT_EQ(random.tensors.at("clip_fea").scalar_type(), at::kBFloat16);
  EXPECT_TRUE(torch::equal(random.tensors.at("y")[1], wt::testing::expected_y(still, 20, 2).to(at::kHalf)));

  // Staged as stored, converted to fp32: the condition counts with the latents and the text.
  EXPECT_EQ(train::staged_bytes_per_sample(clip, /*for_gpu=*/false),
            clip.latents_bytes() + clip.text_bytes() + clip.condition_bytes());
  data::DistributedSampler sampler(dataset.layout(), {1, 0, 2, 5, true, false});
  data::DistributedSampler reference = sampler;
  train::ShardBatchesOptions options;
  train::ShardBatches batches(dataset, sampler, options);
  std::set<int64_t> frames_seen;
  for (int step = 0; step < 6; ++step) {  // 2 + 1 batches an epoch: two epochs
    const auto want = reference.next();
    int64_t epoch = 0;
    const auto batch = batches.next(epoch);
    ASSERT_EQ(batch.indices, want);
    const auto& shape = dataset.shape_of(want.front());
    frames_seen.insert(shape.frames);
    const auto& y = batch.tensors.at("y");
    const auto& clip_fea = batch.tensors.at("clip_fea");
    EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 6, shape.frames, 3, 5}));
    EXPECT_EQ(clip_fea.sizes(), (at::IntArrayRef{2, 4, 3}));
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    EXPECT_EQ(clip_fea.scalar_type(), at::kFloat);
    EXPECT_EQ(batch.tensors.at("latents").sizes(), (at::IntArrayRef{2, 4, shape.frames, 3, 5}));
    for (size_t j = 0; j < want.size(); ++j) {
      const auto [seed, row] = source(want[j]);
      EXPECT_TRUE(torch::equal(y[int64_t(j)], wt::testing::expected_y(shape, seed, row).to(at::kHalf).to(at::kFloat)));
      EXPECT_TRUE(torch::equal(clip_fea[int64_t(j)],
                               wt::testing::expected_clip(shape, seed, row).to(at::kBFloat16).to(at::kFloat)));
      EXPECT_TRUE(torch::equal(batch.tensors.at("latents")[int64_t(j)],
                               wt::testing::expected_latents(shape, seed, row).to(at::kHalf).to(at::kFloat)));
    }
  }
  EXPECT_EQ(frames_seen, (std::set<int64_t>{1, 2}));

  // A text-to-video dataset's batches have neither.
  const auto plain_dir = wt::testing::fresh_directory("unconditioned-batches");
  wt::testing::write_shard(plain_dir + "/a.h5", small_shape(), 2, 0);
  train::ShardSamples plain(data::Dataset::open(plain_dir));
  const auto batch = plain.read({0, 1});
  EXPECT_EQ(batch.tensors.count("y"), 0u);
  EXPECT_EQ(batch.tensors.count("clip_fea"), 0u);
}

// A dataset is image-to-video or text-to-video throughout: one line names
// the shard with /y and the one without.
TEST(DataFormat, ConditionedAndUnconditionedShardsAreNotOneDataset) {
  const auto dir = wt::testing::fresh_directory("mixed-condition");
  wt::testing::write_shard(dir + "/a.h5", conditioned_shape(), 2, 0);
  wt::testing::write_shard(dir + "/b.h5", small_shape(), 2, 0);
  EXPECT_EQ(open_error(dir), "data: shard " + dir + "/b.h5 has no /y but shard " + dir +
                                 "/a.h5 has /y [N,6,2,3,5] float32, /clip_fea [N,4,3] float32 (a dataset is "
                                 "image-to-video, every shard with /y, or text-to-video, none with it)");
  EXPECT_FALSE(data::same_dataset(small_shape(), conditioned_shape()));
  EXPECT_NE(small_shape(), conditioned_shape());
  // Conditions of other sizes are named with the rest of both shapes.
  auto other = conditioned_shape();
  other.clip_tokens = 8;
  wt::testing::write_shard(dir + "/b.h5", other, 2, 0);
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/b.h5 has latents [N,4,2,3,5] float32, text_emb [N,6,8] float32, /y [N,6,2,3,5] "
                                 "float32, /clip_fea [N,8,3] float32 but shard " +
                                 dir +
                                 "/a.h5 has latents [N,4,2,3,5] float32, text_emb [N,6,8] float32, /y [N,6,2,3,5] "
                                 "float32, /clip_fea [N,4,3] float32 (the shards of a dataset may differ only in "
                                 "the latents' frames, height and width)");
}

// /y is frame for frame the latents' condition: another F (or N, H, W) is refused.
TEST(DataFormat, ConditionOfAnotherShapeIsRefused) {
  const auto s = conditioned_shape();  // latents [4,2,3,5], y [6,2,3,5], clip_fea [4,3]
  const auto dir = wt::testing::fresh_directory("condition-frames");
  wt::testing::write_shard(dir + "/a.h5", s, 2, 0);
  replace_dataset(dir + "/a.h5", "y", H5T_IEEE_F32LE, {2, 6, 3, 3, 5});
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/a.h5: /y has shape [2,6,3,3,5] but /latents [2,4,2,3,5]: /y must have the "
                                 "latents' N, F, H and W");
  replace_dataset(dir + "/a.h5", "y", H5T_IEEE_F32LE, {2, 6, 2, 3});
  EXPECT_EQ(open_error(dir), "data: shard " + dir + "/a.h5: /y has 4 dimensions [2,6,2,3], expected 5 [N,Cy,F,H,W]");
  replace_dataset(dir + "/a.h5", "y", io::float16_type().get(), {2, 6, 2, 3, 5});
  EXPECT_EQ(open_error(dir),
            "data: shard " + dir + "/a.h5: /y is float16 but /latents float32: /y is stored as /latents is");
  replace_dataset(dir + "/a.h5", "y", H5T_IEEE_F32LE, {2, 6, 2, 3, 5});
  replace_dataset(dir + "/a.h5", "clip_fea", H5T_IEEE_F32LE, {3, 4, 3});
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/a.h5: /clip_fea has shape [3,4,3] but /latents [2,4,2,3,5]: they must have the "
                                 "same N");
  replace_dataset(dir + "/a.h5", "clip_fea", H5T_IEEE_F32LE, {2, 1 << 21, 3});
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/a.h5: /clip_fea has shape [2,2097152,3]: each per-sample size must be in "
                                 "1..1048576");
}

TEST(DataFormat, ClipFeaturesWithoutYAreRefused) {
  const auto dir = wt::testing::fresh_directory("clip-without-y");
  wt::testing::write_shard(dir + "/a.h5", conditioned_shape(), 2, 0);
  delete_dataset(dir + "/a.h5", "y");
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/a.h5: /clip_fea without /y (CLIP features are part of an image-to-video "
                                 "condition, whose /y is missing)");
  // /y alone is a condition (Wan2.2's image-to-video models take no CLIP features).
  const auto alone = wt::testing::fresh_directory("y-without-clip");
  auto s = conditioned_shape();
  s.clip_tokens = s.clip_dim = 0;
  wt::testing::write_shard(alone + "/a.h5", s, 2, 0);
  const auto dataset = data::Dataset::open(alone);
  EXPECT_EQ(dataset.shape(), s);
  EXPECT_EQ(dataset.shape().clip_string(), "none");
  train::ShardSamples samples(dataset);
  const auto batch = samples.read({1});
  EXPECT_TRUE(torch::equal(batch.tensors.at("y")[0], wt::testing::expected_y(s, 0, 1)));
  EXPECT_EQ(batch.tensors.count("clip_fea"), 0u);
}

// A condition came with version 3; an older shard that holds one was not
// written by a writer that meant it.
TEST(DataFormat, AConditionInAVersion2ShardIsRefused) {
  const auto dir = wt::testing::fresh_directory("condition-v2");
  wt::testing::write_shard(dir + "/a.h5", conditioned_shape(), 2, 0);
  EXPECT_EQ(data::inspect_shard(dir + "/a.h5").version, data::kConditionedShardVersion);
  set_version(dir + "/a.h5", 2);
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/a.h5: /y in a format version 2 shard (the image-to-video condition came with "
                                 "version 3: a shard that holds it says 3)");
}

// Version 3 changes nothing for text-to-video data: such a shard is still
// version 2, the very bytes the version-2 writer wrote
// (tests/fixtures/shard-v2/README.md).
TEST(DataFormat, TextToVideoShardsAreStillVersion2ByteForByte) {
  const std::string fixture = std::string(WANTRAIN_SOURCE_DIR) + "/tests/fixtures/shard-v2/text-to-video.h5";
  const auto dir = wt::testing::fresh_directory("t2v-bytes");
  const auto s = small_shape(data::Stored::BFloat16, data::Stored::Float32);
  wt::testing::write_shard(dir + "/a.h5", s, 3, 10);
  const auto info = data::inspect_shard(dir + "/a.h5");
  EXPECT_EQ(info.version, 2);
  EXPECT_FALSE(info.shape.has_condition());
  {
    io::Lock lock(io::library_mutex());
    const auto file = io::open_file(dir + "/a.h5");
    EXPECT_FALSE(io::exists(file.get(), "y"));
    EXPECT_FALSE(io::exists(file.get(), "clip_fea"));
  }
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  if (major == 1 && minor == 10 && release == 8) {  // the fixture's HDF5: the same data make the same bytes
    EXPECT_TRUE(file_bytes(dir + "/a.h5") == file_bytes(fixture)) << "a text-to-video shard's bytes changed";
  } else {  // another HDF5 may lay a file out otherwise: the same contents
    fs::copy_file(fixture, dir + "/b.h5");
    const auto dataset = data::Dataset::open(dir);
    data::SampleReader reader(dataset);
    for (int64_t row = 0; row < 3; ++row) {
      auto a = torch::empty({4, 2, 3, 5}, at::kBFloat16), b = torch::empty_like(a);
      auto ta = torch::empty({6, 8}), tb = torch::empty_like(ta);
      int32_t la = 0, lb = 0;
      reader.read(row, a, ta, la);
      reader.read(3 + row, b, tb, lb);
      EXPECT_TRUE(torch::equal(a, b) && torch::equal(ta, tb) && la == lb) << row;
    }
  }
}

// A VACE model's context (version 4): written and read back sample for
// sample, through the dataset and a batch (the loader's: Encode.Vace...); its reference frames
// before the latents' F; refused in an older version, beside shards without
// one, and with fewer frames than the latents.
TEST(DataFormat, AVaceContextIsVersion4AndReadBackWithItsReferenceFrames) {
  const auto dir = wt::testing::fresh_directory("vace");
  auto s = small_shape();
  s.vace_channels = 5;
  s.vace_references = 2;
  torch::manual_seed(1);
  std::vector<at::Tensor> contexts;
  {
    data::ShardWriter writer(dir + "/a.h5", s, 3, false);
    for (int64_t i = 0; i < 3; ++i) {
      contexts.push_back(torch::randn({5, 2 + s.frames, s.height, s.width}));
      data::SampleCondition condition;
      condition.vace_context = contexts.back();
      writer.write(i, torch::randn({s.channels, s.frames, s.height, s.width}), torch::randn({s.text_len, s.text_dim}),
                   1, "", condition);
    }
    EXPECT_THROW(writer.write(0, torch::zeros({s.channels, s.frames, s.height, s.width}),
                              torch::zeros({s.text_len, s.text_dim}), 1),
                 Error);  // no context for a shard that holds one
  }
  const auto info = data::inspect_shard(dir + "/a.h5");
  EXPECT_EQ(info.version, data::kShardVersion);
  EXPECT_EQ(info.shape, s);
  EXPECT_EQ(info.shape.vace_string(), fmt::format("[N,5,{},{},{}] float32", 2 + s.frames, s.height, s.width));
  {
    train::ShardSamples samples(data::Dataset::open(dir));
    const auto batch = samples.read({2, 0});
    EXPECT_TRUE(torch::equal(batch.tensors.at("vace_context")[0], contexts[2]));
    EXPECT_TRUE(torch::equal(batch.tensors.at("vace_context")[1], contexts[0]));
  }  // the file closed: its version is changed below

  set_version(dir + "/a.h5", 3);
  EXPECT_EQ(open_error(dir), "data: shard " + dir +
                                 "/a.h5: /vace_context in a format version 3 shard (the VACE context came with "
                                 "version 4: a shard that holds it says 4)");
  set_version(dir + "/a.h5", 4);
  wt::testing::write_shard(dir + "/b.h5", small_shape(), 2, 0);
  EXPECT_NE(open_error(dir).find("a dataset is for a VACE model, every shard with /vace_context, or not, none with it"),
            std::string::npos)
      << open_error(dir);
}
