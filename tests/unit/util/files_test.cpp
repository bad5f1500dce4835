// write_file_durably: the whole new file or the old one, never a part.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

namespace fs = std::filesystem;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(WriteFileDurably, ReplacesTheFileWholeAndLeavesNoTemporary) {
  const auto dir = fs::path(::testing::TempDir()) / "files-durable";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model-config.json").string();
  std::ofstream(path) << "old";
  wt::write_file_durably(path, "{\"dim\": 64}\n");
  EXPECT_EQ(read(path), "{\"dim\": 64}\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(WriteFileDurably, AFailureNamesTheFileAndKeepsTheOldOne) {
  const auto dir = fs::path(::testing::TempDir()) / "files-durable-fail";
  fs::remove_all(dir);
  fs::create_directories(dir / "config.json");  // a directory where the file should go: rename fails
  const std::string path = (dir / "config.json").string();
  try {
    wt::write_file_durably(path, "new");
    FAIL() << "no error";
  } catch (const wt::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": cannot rename"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace
