// TFRecord framing and TensorBoard event files at the byte level; the files'
// messages are checked by an independent reader in the launch tests
// (tests/report/tfevents_reader.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "wantrain/report/crc32c.hpp"
#include "wantrain/report/tensorboard_writer.hpp"
#include "wantrain/report/tfrecord.hpp"
#include "wantrain/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using wt::report::crc32c;
using wt::report::masked_crc32c;

std::string temp_dir(const std::string& name) {
  const auto dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// CRC-32C's published check value (RFC 3720's polynomial over "123456789")
// and TensorFlow's mask: rotate right by 15 bits, add 0xa282ead8.
TEST(Crc32c, CheckValueAndMask) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const uint32_t crc = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FramesAndReadsBackAndNamesWhereAFileGoesBad) {
  const std::string dir = temp_dir("tfrecord");
  const std::string path = dir + "/records";
  const std::vector<std::string> records = {"first", std::string(1000, 'x'), ""};
  {
    std::ofstream out(path, std::ios::binary);
    for (const auto& r : records) out << wt::report::frame_record(r);
  }
  const auto read = wt::report::read_records(path);
  EXPECT_EQ(read.records, records);
  EXPECT_TRUE(read.problem.empty()) << read.problem;
  // Frame: 8 length bytes, 4 CRC bytes, data, 4 CRC bytes.
  EXPECT_EQ(fs::file_size(path), (5 + 16) + (1000 + 16) + 16u);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto with = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    return wt::report::read_records(path);
  };
  std::string flipped = bytes;
  flipped[21 + 12 + 500] ^= 1;  // inside the second record's data
  auto bad = with(flipped);
  EXPECT_EQ(bad.records, std::vector<std::string>{"first"});
  EXPECT_NE(bad.problem.find("the data CRC of the record at byte 21 does not match"), std::string::npos) << bad.problem;
  bad = with(bytes.substr(0, bytes.size() - 3));  // a writer killed mid-record
  EXPECT_EQ(bad.records.size(), 2u);
  EXPECT_NE(bad.problem.find("cut short"), std::string::npos) << bad.problem;
  EXPECT_THROW(wt::report::read_records(dir + "/absent"), wt::Error);
}

// A resumed run's writer cuts the older file to the events at or before
// the resume step; a fresh run's removes older event files.
TEST(TensorBoardWriter, AResumeCutsOlderFilesToTheResumeStep) {
  const std::string dir = temp_dir("tensorboard-cut");
  {
    wt::report::TensorBoardWriter writer(dir, 0);
    for (int64_t step = 1; step <= 10; ++step) writer.scalars(step, {{"train/loss", 1.0 / double(step)}});
  }
  auto files = event_files(dir);
  ASSERT_EQ(files.size(), 1u);
  // file_version, START, 10 summaries.
  EXPECT_EQ(wt::report::read_records(files[0]).records.size(), 12u);
  const std::string first = files[0];
  {
    wt::report::TensorBoardWriter writer(dir, 4);
    EXPECT_TRUE(writer.notes().empty());
    EXPECT_NE(writer.path(), first);
    writer.scalars(5, {{"train/loss", 0.2}});
  }
  files = event_files(dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(wt::report::read_records(first).records.size(), 2u + 4u);
  // A truncated tail is dropped with a note, the whole records kept.
  fs::resize_file(first, fs::file_size(first) - 2);
  {
    wt::report::TensorBoardWriter writer(dir, 10);
    ASSERT_EQ(writer.notes().size(), 1u);
    EXPECT_NE(writer.notes()[0].find(first), std::string::npos) << writer.notes()[0];
  }
  EXPECT_EQ(wt::report::read_records(first).records.size(), 2u + 3u);
  // A fresh run: the older files' events are gone, and so are the files.
  { wt::report::TensorBoardWriter writer(dir, 0); }
  EXPECT_EQ(event_files(dir).size(), 1u);
}

}  // namespace
