// The restricted .pth reader against files that PyTorch itself wrote
// (PyTorch's torch.save), and against files that are not state dicts,
// that ask for code, or that are cut or corrupted: each is one UsageError
// naming the file, and nothing ever runs or crashes.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "../../common/build_paths.hpp"
#include "../../common/small_models.hpp"
#include "wantrain/io/pth.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace fs = std::filesystem;
using wt::io::PthFile;

namespace {

// What the files hold, written by PyTorch. The tensors are built from
// formulas the test repeats in C++, so the expected values are derived,
// not pasted.
const char* kWriter = R"(
import collections, os, sys, zipfile
import torch
out = sys.argv[1]
base = torch.arange(12, dtype=torch.float16).reshape(3, 4)
sd = collections.OrderedDict()
sd['a.weight'] = torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.25
sd['b.bias'] = (torch.arange(4) - 2).to(torch.bfloat16)
sd['c.view'] = base[:, 1:3]          # not contiguous, an offset into a shared storage
sd['c.transposed'] = base.t()       # the same storage again
sd['d.count'] = torch.arange(5, dtype=torch.int64) * 1000000007
sd['e.mask'] = torch.tensor([True, False, True])
sd['f.empty'] = torch.zeros(0, 3)
sd['g.double'] = torch.arange(3, dtype=torch.float64) / 3
torch.save(sd, os.path.join(out, 'state.pth'))

linear = torch.nn.Linear(3, 2)      # a module's state_dict: an OrderedDict with _metadata
with torch.no_grad():
    linear.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) - 1)
    linear.bias.copy_(torch.tensor([0.5, -0.5]))
torch.save(linear.state_dict(), os.path.join(out, 'module.pth'))
torch.save({'w': torch.nn.Parameter(torch.ones(2))}, os.path.join(out, 'parameter.pth'))

class Code:
    def __reduce__(self):
        return (os.system, ('touch ' + os.path.join(out, 'ran'),))
torch.save({'x': Code()}, os.path.join(out, 'code.pth'))
torch.save([torch.zeros(2)], os.path.join(out, 'list.pth'))
torch.save({'version': 1, 'w': torch.zeros(2)}, os.path.join(out, 'not_a_tensor.pth'))
torch.save(sd, os.path.join(out, 'legacy.pth'), _use_new_zipfile_serialization=False)
with zipfile.ZipFile(os.path.join(out, 'state.pth')) as src, \
     zipfile.ZipFile(os.path.join(out, 'compressed.pth'), 'w', zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        dst.writestr(info.filename, src.read(info.filename))

# Pickles no state dict needs, built by hand: a tuple nested 900000 deep
# (freeing it must not recurse), and more values than the reader keeps.
for name, depth in (('deep.pth', 900000), ('many.pth', 2000000)):
    with zipfile.ZipFile(os.path.join(out, name), 'w') as z:
        z.writestr('archive/data.pkl', b'\x80\x02)' + b'\x85' * depth + b'.')

# The same archive in ZIP64 form, as torch.save writes files over 4 GiB (the
# umT5 weights): every size and offset in ZIP64 fields, a ZIP64 directory
# record and its locator. PyTorch must read it back, so it is a valid one.
import struct, zlib
with zipfile.ZipFile(os.path.join(out, 'state.pth')) as src:
    entries = [(i.filename.encode(), src.read(i.filename)) for i in src.infolist()]
body, directory = b'', b''
for name, data in entries:
    crc, offset = zlib.crc32(data), len(body)
    body += struct.pack('<IHHHHHIIIHH', 0x04034b50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name), 20)
    body += name + struct.pack('<HHQQ', 1, 16, len(data), len(data)) + data
    directory += struct.pack('<IHHHHHHIIIHHHHHII', 0x02014b50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                             len(name), 28, 0, 0, 0, 0, 0xFFFFFFFF)
    directory += name + struct.pack('<HHQQQ', 1, 24, len(data), len(data), offset)
record = len(body) + len(directory)
tail = struct.pack('<IQHHIIQQQQ', 0x06064b50, 44, 45, 45, 0, 0, len(entries), len(entries), len(directory), len(body))
tail += struct.pack('<IIQI', 0x07064b50, 0, record, 1)
tail += struct.pack('<IHHHHIIH', 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
with open(os.path.join(out, 'zip64.pth'), 'wb') as f:
    f.write(body + directory + tail)
again = torch.load(os.path.join(out, 'zip64.pth'))
assert all(torch.equal(again[k], v) for k, v in sd.items()), 'PyTorch reads the ZIP64 file back'
)";

class Pth : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("wantrain-pth-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/write.py") << kWriter;
    const std::string command = std::string(WANTRAIN_PYTHON) + " " + dir_ + "/write.py " + dir_ + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string error_of(const std::string& path) {
    try {
      PthFile::open(path);
    } catch (const wt::UsageError& e) {
      return e.what();
    }
    return "";
  }

  static std::string dir_;
};
std::string Pth::dir_;

TEST_F(Pth, ReadsEveryTensorOfAStateDictAsPyTorchSavedIt) {
  const auto file = PthFile::open(dir_ + "/state.pth");
  std::vector<std::string> names;
  for (const auto& e : file.entries()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.weight", "b.bias", "c.view", "c.transposed", "d.count", "e.mask",
                                             "f.empty", "g.double"}));
  auto read = [&](const std::string& name) {
    const auto* entry = file.find(name);
    EXPECT_NE(entry, nullptr) << name;
    return entry ? file.read(*entry) : at::Tensor();
  };
  const auto base = torch::arange(12, torch::kHalf).reshape({3, 4});
  const auto expect_same = [](const at::Tensor& got, const at::Tensor& want) {
    ASSERT_EQ(got.scalar_type(), want.scalar_type());
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_TRUE(torch::equal(got, want.contiguous())) << got << want;
  };
  expect_same(read("a.weight"), torch::arange(6, torch::kFloat).reshape({2, 3}) * 0.25);
  expect_same(read("b.bias"), (torch::arange(4) - 2).to(torch::kBFloat16));
  expect_same(read("c.view"), base.slice(1, 1, 3));
  expect_same(read("c.transposed"), base.t());
  expect_same(read("d.count"), torch::arange(5, torch::kLong) * 1000000007);
  expect_same(read("e.mask"), torch::tensor({true, false, true}));
  expect_same(read("f.empty"), torch::zeros({0, 3}));
  expect_same(read("g.double"), torch::arange(3, torch::kDouble) / 3);
  // Shared storages are found as such: one storage, two views.
  EXPECT_EQ(file.find("c.view")->data_offset, file.find("c.transposed")->data_offset);
  EXPECT_EQ(file.find("c.view")->storage_offset, 1);
}

TEST_F(Pth, ReadsAZip64ArchiveAsTheSameTensors) {
  const auto plain = PthFile::open(dir_ + "/state.pth"), zip64 = PthFile::open(dir_ + "/zip64.pth");
  ASSERT_EQ(zip64.entries().size(), plain.entries().size());
  for (const auto& entry : plain.entries()) {
    const auto* other = zip64.find(entry.name);
    ASSERT_NE(other, nullptr) << entry.name;
    EXPECT_TRUE(torch::equal(zip64.read(*other), plain.read(entry))) << entry.name;
  }
}

TEST_F(Pth, ReadsAModulesStateDictWithItsMetadataAndParameters) {
  const auto file = PthFile::open(dir_ + "/module.pth");
  ASSERT_EQ(file.entries().size(), 2u);
  EXPECT_TRUE(torch::equal(file.read(*file.find("weight")), torch::arange(6, torch::kFloat).reshape({2, 3}) - 1));
  EXPECT_TRUE(torch::equal(file.read(*file.find("bias")), torch::tensor({0.5f, -0.5f})));
  const auto parameter = PthFile::open(dir_ + "/parameter.pth");
  EXPECT_TRUE(torch::equal(parameter.read(*parameter.find("w")), torch::ones({2})));
}

TEST_F(Pth, CodeInThePickleIsRefusedAndNeverRuns) {
  const auto error = error_of(dir_ + "/code.pth");
  EXPECT_NE(error.find(dir_ + "/code.pth: data.pkl asks for posix.system"), std::string::npos) << error;
  EXPECT_NE(error.find("wantrain runs no code from it"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(dir_ + "/ran"));
}

TEST_F(Pth, WhatIsNotAStateDictOfTensorsIsOneClearError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"list.pth", "list.pth: not a state dict (the pickle holds no dict of tensors)"},
      {"not_a_tensor.pth", "not_a_tensor.pth: not a state dict of tensors: version is not a tensor"},
      {"legacy.pth", "legacy.pth: not a torch.save file (no zip directory"},
      {"compressed.pth", "is compressed; torch.save stores its entries"},
      {"write.py", "write.py: not a torch.save file (no zip directory"},
      {"deep.pth", "deep.pth: not a state dict (the pickle holds no dict of tensors)"},
      {"many.pth", "many.pth: data.pkl makes more than 1048576 values; a state dict needs far fewer"},
      {"absent.pth", "absent.pth: no such file"},
  };
  for (const auto& [name, expected] : cases) {
    const auto error = error_of(dir_ + "/" + name);
    EXPECT_NE(error.find(expected), std::string::npos) << name << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << name << ": one line, got " << error;
  }
}

TEST_F(Pth, CutAndCorruptedFilesNeverCrash) {
  std::ifstream in(dir_ + "/state.pth", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = dir_ + "/damaged.pth";
  auto try_read = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    try {
      const auto file = PthFile::open(path);
      for (const auto& entry : file.entries()) file.read(entry);
      return true;
    } catch (const wt::Error&) {  // UsageError for the index, Error for a failed read
      return false;
    }
  };
  int refused = 0;
  for (size_t cut = 0; cut < bytes.size(); cut += 7) refused += !try_read(bytes.substr(0, cut));
  EXPECT_EQ(refused, int((bytes.size() + 6) / 7));  // every cut loses the directory at the end
  std::mt19937 random(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string damaged = bytes;
    for (int flip = 0; flip < 4; ++flip) damaged[random() % damaged.size()] ^= char(1 + random() % 255);
    try_read(damaged);  // refused or read; never a crash, never a hang
  }
}

// A model's weights as PyTorch users keep them: torch.save(state_dict) in
// bf16, loaded by --init / --weights / --teacher like a safetensors file.
TEST_F(Pth, AWanModelSavedByTorchLoadsAsItsSafetensorsDo) {
  const auto config = wt::testing::small_wan_config();
  auto saved = wt::testing::seeded_small_model(config);
  wt::wan::save_weights(*saved, dir_ + "/small.safetensors");
  const std::string convert = std::string(WANTRAIN_PYTHON) + " -c \"import sys, torch; sys.path.insert(0, '" +
                              WANTRAIN_SOURCE_DIR + "/tests/reference'); import wan_reference as r; " +
                              "torch.save({k: v.to(torch.bfloat16) for k, v in r.read_safetensors('" + dir_ +
                              "/small.safetensors').items()}, '" + dir_ + "/small.pth')\" 2>&1";
  ASSERT_EQ(std::system(convert.c_str()), 0) << convert;

  torch::manual_seed(99);
  wt::wan::WanModel loaded(config);
  const auto report = wt::wan::load_weights(*loaded, dir_ + "/small.pth");
  EXPECT_TRUE(report.complete()) << report.summary();
  EXPECT_EQ(report.loaded.size(), saved->named_parameters().size());
  for (const auto& item : saved->named_parameters()) {
    const auto want = item.value().to(torch::kBFloat16).to(torch::kFloat);  // what the bf16 file holds
    EXPECT_TRUE(torch::equal(loaded->named_parameters()[item.key()], want)) << item.key();
  }
}

}  // namespace
