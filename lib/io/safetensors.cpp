#include "wantrain/io/safetensors.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

namespace wt::io {
namespace {

TensorDtype tensor_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return TensorDtype::F32;
    case at::kHalf: return TensorDtype::F16;
    case at::kBFloat16: return TensorDtype::BF16;
    default:
      throw UsageError(fmt::format("safetensors: wantrain writes F32, F16 or BF16, not {}", c10::toString(dtype)));
  }
}

}  // namespace

at::ScalarType scalar_type(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::F16: return at::kHalf;
    case TensorDtype::BF16: return at::kBFloat16;
    case TensorDtype::F32: break;
  }
  return at::kFloat;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto bad = [&](const std::string& what) { throw UsageError(fmt::format("safetensors {}: {}", path, what)); };
  if (const auto why = unreadable_file_reason(path); !why.empty()) bad(why);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) bad(fmt::format("cannot read the file ({})", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) bad("cannot open the file");
  if (size < 8) bad(fmt::format("{} bytes is too short for a safetensors file (8-byte header length first)", size));
  unsigned char first[8];
  in.read(reinterpret_cast<char*>(first), 8);
  const uint64_t length = safetensors_header_length(path, first, size);
  std::string header(length, '\0');
  if (!in.read(header.data(), std::streamsize(length))) bad("cannot read the header");
  SafetensorsFile file;
  file.path_ = path;
  file.header_ = parse_safetensors_header(path, header, size);
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto& entries = header_.entries;
  auto it = std::lower_bound(entries.begin(), entries.end(), name,
                             [](const auto& e, const std::string& n) { return e.name < n; });
  return it != entries.end() && it->name == name ? &*it : nullptr;
}

at::Tensor SafetensorsFile::read(const SafetensorsEntry& entry) const {
  auto tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(scalar_type(entry.dtype)));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(header_.data_start + entry.begin));
  if (!in || !in.read(static_cast<char*>(tensor.data_ptr()), std::streamsize(entry.end - entry.begin)))
    throw Error(fmt::format("safetensors {}: cannot read tensor '{}' (file changed or truncated?)", path_, entry.name));
  return tensor;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, at::ScalarType dtype,
                       const std::map<std::string, std::string>& metadata) {
  const char* name_of_dtype = dtype_name(tensor_dtype(dtype));
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (header.contains(name)) throw Error(fmt::format("safetensors {}: tensor '{}' given twice", path, name));
    auto t = tensor.detach().to(torch::kCPU, dtype).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", name_of_dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
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
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.numel() * t.element_size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(fmt::format("safetensors {}: cannot write the file (disk full or no permission?)", path));
    }
  }
  std::error_code ec;
  sync_file(tmp);  // the bytes are on disk before the name says the file is complete
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(fmt::format("safetensors {}: cannot rename {} into place ({})", path, tmp, ec.message()));
  sync_directory(std::filesystem::path(path).parent_path().string());
}

}  // namespace wt::io
