#include "wantrain/io/safetensors_header.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <tuple>

#include "wantrain/util/error.hpp"
#include "wantrain/util/json.hpp"

namespace wt::io {
namespace {

using nlohmann::json;

// The official implementation refuses headers over 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError(fmt::format("safetensors {}: {}", path, what));
}

bool dtype_from_name(const std::string& name, TensorDtype& dtype) {
  if (name == "F32")
    dtype = TensorDtype::F32;
  else if (name == "F16")
    dtype = TensorDtype::F16;
  else if (name == "BF16")
    dtype = TensorDtype::BF16;
  else
    return false;
  return true;
}

uint64_t unsigned_value(const json& v) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw std::invalid_argument("not a non-negative integer");
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& v) {
  auto fail = [&](const std::string& what) { bad(path, fmt::format("tensor '{}': {}", name, what)); };
  if (!v.is_object()) fail("header entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) fail(fmt::format("header entry has no '{}'", key));
  SafetensorsEntry e;
  e.name = name;
  const json& dtype = v.at("dtype");
  if (!dtype.is_string() || !dtype_from_name(dtype.get<std::string>(), e.dtype))
    fail(fmt::format("dtype {} is not one wantrain reads (F32, F16, BF16)", json_excerpt(dtype)));
  const json& shape = v.at("shape");
  const json& offsets = v.at("data_offsets");
  if (!shape.is_array() || shape.size() > 16) fail(fmt::format("shape {} is not a list of sizes", json_excerpt(shape)));
  if (!offsets.is_array() || offsets.size() != 2)
    fail(fmt::format("data_offsets {} is not [begin, end]", json_excerpt(offsets)));
  uint64_t bytes = dtype_size(e.dtype);
  try {
    for (const json& s : shape) {
      const uint64_t n = unsigned_value(s);
      if (n > uint64_t(std::numeric_limits<int64_t>::max()) ||
          (n != 0 && bytes > std::numeric_limits<uint64_t>::max() / n))
        fail(fmt::format("shape {} is too large", json_excerpt(shape)));
      bytes *= n;
      e.shape.push_back(int64_t(n));
    }
    e.begin = unsigned_value(offsets[0]);
    e.end = unsigned_value(offsets[1]);
  } catch (const std::invalid_argument&) {
    fail(fmt::format("shape {} or data_offsets {} holds something other than non-negative integers",
                     json_excerpt(shape), json_excerpt(offsets)));
  }
  if (e.end < e.begin) fail(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
  if (e.end - e.begin != bytes)
    fail(fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}", e.begin, e.end, e.end - e.begin,
                     dtype.get<std::string>(), json_excerpt(shape), bytes));
  return e;
}

}  // namespace

const char* dtype_name(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::F32: return "F32";
    case TensorDtype::F16: return "F16";
    case TensorDtype::BF16: return "BF16";
  }
  return "?";
}

uint64_t dtype_size(TensorDtype dtype) { return dtype == TensorDtype::F32 ? 4 : 2; }

uint64_t safetensors_header_length(const std::string& path, const unsigned char (&first)[8], uint64_t file_size) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | first[i];
  if (length > kMaxHeaderBytes)
    bad(path, fmt::format("header length {} is over the 100 MB limit: not a safetensors file?", length));
  if (length > file_size - 8)
    bad(path, fmt::format("header length {} runs past the end of the {}-byte file (truncated?)", length, file_size));
  return length;
}

SafetensorsHeader parse_safetensors_header(const std::string& path, const std::string& header, uint64_t file_size) {
  if (header.empty() || header.front() != '{') bad(path, "the header is not a JSON object");
  if (file_size < 8 + header.size()) bad(path, "the header runs past the end of the file");
  // Duplicate names are refused: JSON parsers differ on which one wins.
  std::set<std::string> seen;
  std::string duplicate;
  json doc;
  try {
    doc = parse_json(header, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const JsonError& e) {
    bad(path, fmt::format("the header is not valid JSON ({})", e.what()));
  }
  if (!duplicate.empty()) bad(path, fmt::format("tensor '{}' appears twice in the header", duplicate));
  if (!doc.is_object()) bad(path, "the header is not a JSON object");

  SafetensorsHeader result;
  result.data_start = 8 + header.size();
  const uint64_t data_size = file_size - result.data_start;
  for (const auto& item : doc.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) bad(path, "__metadata__ is not an object of strings");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string()) bad(path, fmt::format("__metadata__ '{}' is not a string", m.key()));
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    result.entries.push_back(parse_entry(path, item.key(), item.value()));
  }
  // The tensors must tile [0, data_size) exactly.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : result.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t covered = 0;
  for (const auto* e : by_offset) {
    if (e->begin < covered)
      bad(path, fmt::format("tensor '{}' at bytes [{}, {}) overlaps the tensor before it", e->name, e->begin, e->end));
    if (e->begin > covered)
      bad(path, fmt::format("bytes [{}, {}) before tensor '{}' belong to no tensor", covered, e->begin, e->name));
    if (e->end > data_size)
      bad(path, fmt::format("tensor '{}' at bytes [{}, {}) runs past the {} bytes of data (truncated?)", e->name,
                            e->begin, e->end, data_size));
    covered = e->end;
  }
  if (covered != data_size)
    bad(path, fmt::format("{} bytes after the last tensor belong to no tensor", data_size - covered));
  std::sort(result.entries.begin(), result.entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return result;
}

}  // namespace wt::io
