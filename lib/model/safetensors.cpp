#include "model/safetensors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

namespace wt::model {
namespace {

using nlohmann::json;

// The official implementation refuses headers over 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError(fmt::format("safetensors {}: {}", path, what));
}

bool dtype_from_name(const std::string& name, at::ScalarType& dtype) {
  if (name == "F32") dtype = at::kFloat;
  else if (name == "F16") dtype = at::kHalf;
  else if (name == "BF16") dtype = at::kBFloat16;
  else return false;
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
    fail(fmt::format("dtype {} is not one wantrain reads (F32, F16, BF16)", dtype.dump()));
  const json& shape = v.at("shape");
  const json& offsets = v.at("data_offsets");
  if (!shape.is_array() || shape.size() > 16) fail(fmt::format("shape {} is not a list of sizes", shape.dump()));
  if (!offsets.is_array() || offsets.size() != 2) fail(fmt::format("data_offsets {} is not [begin, end]", offsets.dump()));
  const uint64_t item = c10::elementSize(e.dtype);
  uint64_t bytes = item;
  try {
    for (const json& s : shape) {
      const uint64_t n = unsigned_value(s);
      if (n > uint64_t(std::numeric_limits<int64_t>::max()) || (n != 0 && bytes > std::numeric_limits<uint64_t>::max() / n))
        fail(fmt::format("shape {} is too large", shape.dump()));
      bytes *= n;
      e.shape.push_back(int64_t(n));
    }
    e.begin = unsigned_value(offsets[0]);
    e.end = unsigned_value(offsets[1]);
  } catch (const std::invalid_argument&) {
    fail(fmt::format("shape {} or data_offsets {} holds something other than non-negative integers", shape.dump(),
                     offsets.dump()));
  }
  if (e.end < e.begin) fail(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
  if (e.end - e.begin != bytes)
    fail(fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}", e.begin, e.end, e.end - e.begin,
                     dtype.get<std::string>(), shape.dump(), bytes));
  return e;
}

}  // namespace

const char* safetensors_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    default: throw UsageError(fmt::format("safetensors: wantrain writes F32, F16 or BF16, not {}", c10::toString(dtype)));
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) bad(path, fmt::format("cannot read the file ({})", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open the file");
  if (size < 8) bad(path, fmt::format("{} bytes is too short for a safetensors file (8-byte header length first)", size));
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  if (length > kMaxHeaderBytes) bad(path, fmt::format("header length {} is over the 100 MB limit: not a safetensors file?", length));
  if (length > size - 8) bad(path, fmt::format("header length {} runs past the end of the {}-byte file (truncated?)", length, size));
  std::string header(length, '\0');
  if (!in.read(header.data(), std::streamsize(length))) bad(path, "cannot read the header");
  return parse_header(path, header, size);
}

SafetensorsFile SafetensorsFile::parse_header(const std::string& path, const std::string& header, uint64_t file_size) {
  if (header.empty() || header.front() != '{') bad(path, "the header is not a JSON object");
  // Duplicate names are refused: JSON parsers differ on which one wins.
  std::set<std::string> seen;
  std::string duplicate;
  json doc;
  try {
    doc = json::parse(header, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    bad(path, fmt::format("the header is not valid JSON ({})", e.what()));
  }
  if (!duplicate.empty()) bad(path, fmt::format("tensor '{}' appears twice in the header", duplicate));
  if (!doc.is_object()) bad(path, "the header is not a JSON object");

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + header.size();
  const uint64_t data_size = file_size - file.data_start_;
  for (const auto& item : doc.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) bad(path, "__metadata__ is not an object of strings");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string()) bad(path, fmt::format("__metadata__ '{}' is not a string", m.key()));
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    file.entries_.push_back(parse_entry(path, item.key(), item.value()));
  }
  // The tensors must tile [0, data_size) exactly.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : file.entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
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
  std::sort(file.entries_.begin(), file.entries_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name, [](const auto& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

at::Tensor SafetensorsFile::read(const SafetensorsEntry& entry) const {
  auto tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(data_start_ + entry.begin));
  if (!in || !in.read(static_cast<char*>(tensor.data_ptr()), std::streamsize(entry.end - entry.begin)))
    throw Error(fmt::format("safetensors {}: cannot read tensor '{}' (file changed or truncated?)", path_, entry.name));
  return tensor;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, at::ScalarType dtype,
                       const std::map<std::string, std::string>& metadata) {
  const char* dtype_name = safetensors_dtype_name(dtype);
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (header.contains(name)) throw Error(fmt::format("safetensors {}: tensor '{}' given twice", path, name));
    auto t = tensor.detach().to(torch::kCPU, dtype).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as the official writer does
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(length_bytes), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& t : data) out.write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.numel() * t.element_size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(fmt::format("safetensors {}: cannot write the file (disk full or no permission?)", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(fmt::format("safetensors {}: cannot rename {} into place ({})", path, tmp, ec.message()));
}

}  // namespace wt::model
