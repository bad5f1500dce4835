#include "wantrain/report/tfrecord.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iterator>

#include "wantrain/report/crc32c.hpp"
#include "wantrain/util/error.hpp"

namespace wt::report {
namespace {

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(const std::string& in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return value;
}

}  // namespace

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

RecordFile read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open for reading", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RecordFile file;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      file.problem = fmt::format("{}: a record header cut short at byte {}", path, at);
      break;
    }
    const uint64_t length = get_le(bytes, at, 8);
    if (get_le(bytes, at + 8, 4) != masked_crc32c(bytes.data() + at, 8)) {
      file.problem = fmt::format("{}: the length CRC of the record at byte {} does not match", path, at);
      break;
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      file.problem = fmt::format("{}: the record at byte {} is cut short", path, at);
      break;
    }
    const size_t data = at + 12;
    if (get_le(bytes, data + length, 4) != masked_crc32c(bytes.data() + data, length)) {
      file.problem = fmt::format("{}: the data CRC of the record at byte {} does not match", path, at);
      break;
    }
    file.records.push_back(bytes.substr(data, length));
    at = data + length + 4;
  }
  return file;
}

}  // namespace wt::report
