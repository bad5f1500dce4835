#include "wantrain/wan/model/weights.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "wantrain/nn/fp8_weights.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/folder_paths.hpp"
#include "wantrain/util/json.hpp"

namespace wt::wan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_index(const std::string& path) { return fs::path(path).extension() == ".json"; }

// "a, b, c and 4 more"
std::string some_names(const std::vector<std::string>& names, size_t shown = 4) {
  std::vector<std::string> head(names.begin(), names.begin() + std::min(shown, names.size()));
  std::string text = fmt::format("{}", fmt::join(head, ", "));
  if (names.size() > shown) text += fmt::format(" and {} more", names.size() - shown);
  return text;
}

}  // namespace

WeightFiles WeightFiles::open(const std::string& path) {
  WeightFiles w;
  w.path_ = path;
  if (!is_index(path)) {
    w.files_.push_back(io::SafetensorsFile::open(path));
    for (const auto& e : w.files_[0].entries()) w.tensors_[e.name] = {0, &e};
    return w;
  }
  if (const auto why = unreadable_file_reason(path); !why.empty())
    throw UsageError(fmt::format("weights index {}: {}", path, why));
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("weights index {}: cannot open the file", path));
  std::ostringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = parse_json(text.str());
  } catch (const JsonError& e) {
    throw UsageError(fmt::format("weights index {}: not valid JSON ({})", path, e.what()));
  }
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object())
    throw UsageError(fmt::format("weights index {}: no \"weight_map\" object of tensor name -> file", path));
  std::map<std::string, size_t> file_of;
  const fs::path dir = fs::path(path).parent_path();
  // First open every file named, then resolve names: files_ must not move after entries are referenced.
  for (const auto& item : doc["weight_map"].items()) {
    if (!item.value().is_string())
      throw UsageError(fmt::format("weights index {}: tensor '{}' maps to {}, not a file name", path, item.key(),
                                   json_excerpt(item.value())));
    const std::string file = item.value().get<std::string>();
    if (file_of.count(file)) continue;
    if (const auto why = outside_folder_reason(dir.string(), file); !why.empty())
      throw UsageError(
          fmt::format("weights index {}: tensor '{}' names a file outside the index's folder: {} "
                      "(an index names only files of its own folder: docs/model.md, \"Files a "
                      "folder names\")",
                      path, item.key(), why));
    const std::string file_path = (dir / file).string();
    if (!fs::exists(file_path))
      throw UsageError(fmt::format("weights index {}: file {} that it names does not exist", path, file_path));
    file_of[file] = w.files_.size();
    w.files_.push_back(io::SafetensorsFile::open(file_path));
  }
  for (const auto& item : doc["weight_map"].items()) {
    const size_t f = file_of.at(item.value().get<std::string>());
    const io::SafetensorsEntry* e = w.files_[f].find(item.key());
    if (!e)
      throw UsageError(fmt::format("weights index {}: tensor '{}' is not in {}, the file it names", path, item.key(),
                                   w.files_[f].path()));
    w.tensors_[item.key()] = {f, e};
  }
  return w;
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> names;
  for (const auto& [name, where] : tensors_) names.push_back(name);
  return names;
}

const io::SafetensorsEntry& WeightFiles::entry(const std::string& name) const { return *tensors_.at(name).second; }

at::Tensor WeightFiles::read(const std::string& name) const {
  const auto& [file, entry] = tensors_.at(name);
  return files_[file].read(*entry);
}

std::string LoadReport::summary() const {
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back(fmt::format("{} missing ({})", missing.size(), some_names(missing)));
  if (!unexpected.empty())
    parts.push_back(fmt::format("{} unexpected ({})", unexpected.size(), some_names(unexpected)));
  if (!mismatched.empty())
    parts.push_back(fmt::format("{} of another shape ({})", mismatched.size(), some_names(mismatched, 2)));
  if (parts.empty()) return fmt::format("all {} tensors loaded", loaded.size());
  return fmt::format("{}", fmt::join(parts, "; "));
}

namespace {

// A TensorSource over a file's tensors by their stored names: official
// names as they are, diffusers names mapped.
TensorSource named_source(const std::string& path,
                          const std::vector<std::pair<std::string, std::vector<int64_t>>>& stored,
                          std::function<at::Tensor(const std::string& stored_name)> read_stored) {
  std::vector<std::string> file_names;
  for (const auto& item : stored) file_names.push_back(item.first);
  TensorSource source;
  source.path = path;
  source.diffusers_names = uses_diffusers_names(file_names);
  for (const auto& [name, shape] : stored) {
    const std::string official = source.diffusers_names ? official_name(name) : name;
    if (!source.shapes.emplace(official, shape).second)
      throw UsageError(fmt::format("weights {}: tensors '{}' and '{}' both name parameter '{}'", path,
                                   source.stored_names.count(official) ? source.stored_names.at(official) : official,
                                   name, official));
    if (official != name) source.stored_names.emplace(official, name);
  }
  source.read = [read_stored = std::move(read_stored), names = source.stored_names](const std::string& name) {
    const auto it = names.find(name);
    return read_stored(it == names.end() ? name : it->second);
  };
  return source;
}

}  // namespace

bool is_pth(const std::string& path) {
  const auto extension = fs::path(path).extension();
  return extension == ".pth" || extension == ".pt";
}

TensorSource open_weights(const std::string& path) {
  // A diffusers folder: its transformer's weights (one file or the shards' index).
  if (const auto folder = find_transformer_folder(path)) return open_weights(folder->weights);
  std::vector<std::pair<std::string, std::vector<int64_t>>> stored;
  if (is_pth(path)) {
    auto file = std::make_shared<const io::PthFile>(io::PthFile::open(path));
    for (const auto& entry : file->entries()) stored.emplace_back(entry.name, entry.shape);
    return named_source(path, stored, [file](const std::string& name) { return file->read(*file->find(name)); });
  }
  auto files = std::make_shared<const WeightFiles>(WeightFiles::open(path));
  for (const auto& name : files->names()) stored.emplace_back(name, files->entry(name).shape);
  return named_source(path, stored, [files](const std::string& name) { return files->read(name); });
}

TensorSource tensors_source(const io::NamedTensors& tensors, const std::string& what) {
  TensorSource source;
  source.path = what;
  auto by_name = std::make_shared<std::map<std::string, at::Tensor>>();
  for (const auto& [name, t] : tensors) {
    by_name->emplace(name, t);
    source.shapes.emplace(name, t.sizes().vec());
  }
  source.read = [by_name](const std::string& name) { return by_name->at(name); };
  return source;
}

LoadReport load_weights(torch::nn::Module& module, const std::string& path, LoadMode mode) {
  return load_weights(module, open_weights(path), mode);
}

double weights_bytes(const std::string& path, at::ScalarType dtype, const std::string& containing) {
  double elements = 0;
  for (const auto& [name, shape] : open_weights(path).shapes)
    if (containing.empty() || name.find(containing) != std::string::npos)
      elements += double(c10::multiply_integers(shape));
  return elements * double(c10::elementSize(dtype));
}

LoadReport match_weights(const std::vector<ParameterShape>& parameters, const TensorSource& source) {
  LoadReport report;
  report.diffusers_names = source.diffusers_names;
  std::set<std::string> model_names;
  for (const auto& [name, shape] : parameters) {
    model_names.insert(name);
    const auto it = source.shapes.find(name);
    if (it == source.shapes.end()) {
      report.missing.push_back(name);
      continue;
    }
    if (shape != it->second) {
      report.mismatched.push_back(
          fmt::format("{}: file [{}] vs model [{}]", name, fmt::join(it->second, ","), fmt::join(shape, ",")));
      continue;
    }
    report.loaded.push_back(name);
  }
  for (const auto& [official, shape] : source.shapes)
    if (!model_names.count(official))
      report.unexpected.push_back(source.stored_names.count(official) ? source.stored_names.at(official) : official);
  return report;
}

namespace {
void require_match(const LoadReport& report, const TensorSource& source) {
  if (!report.complete())
    throw UsageError(fmt::format("weights {}: do not match the model: {}", source.path, report.summary()));
}
}  // namespace

void check_weights_fit(const TensorSource& source, const WanConfig& config) {
  require_match(match_weights(parameter_shapes(config), source), source);
}

LoadReport load_weights(torch::nn::Module& module, const TensorSource& source, LoadMode mode, const EachTensor& each) {
  std::vector<ParameterShape> shapes;
  std::map<std::string, at::Tensor> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    shapes.emplace_back(item.key(), item.value().sizes().vec());
    params.emplace(item.key(), item.value());
  }
  const LoadReport report = match_weights(shapes, source);
  if (mode == LoadMode::Strict) require_match(report, source);

  // A weight held in fp8 is quantised as it is copied, into its scales beside it.
  std::map<std::string, at::Tensor> buffers;
  for (const auto& item : module.named_buffers(/*recurse=*/true)) buffers.emplace(item.key(), item.value());
  torch::NoGradGuard no_grad;
  for (const auto& name : report.loaded) {
    const auto read = source.read(name);
    if (each) each(name, read);
    auto& param = params.at(name);
    if (param.scalar_type() == at::kFloat8_e4m3fn)
      nn::quantize_fp8(read, param, buffers.at(name + "_scale"));
    else
      param.copy_(read);
  }
  return report;
}

void save_weights(const torch::nn::Module& module, const std::string& path, at::ScalarType dtype, WeightNames names,
                  const std::map<std::string, std::string>& metadata) {
  io::NamedTensors tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    tensors.emplace_back(names == WeightNames::Diffusers ? diffusers_name(item.key()) : item.key(), item.value());
  auto all = metadata;
  all["format"] = "pt";
  io::write_safetensors(path, tensors, dtype, all);
}

WeightsChecksum::WeightsChecksum(const WanConfig& config) : crc_(crc32_z(0L, Z_NULL, 0)) {
  const std::string config_json = to_json(config);
  crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(config_json.data()), config_json.size());
}

void WeightsChecksum::add(const std::string& name, const at::Tensor& tensor) {
  crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(name.data()), name.size());
  const auto data = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  crc_ = crc32_z(crc_, static_cast<const Bytef*>(data.data_ptr()), size_t(data.numel()) * sizeof(float));
}

std::string WeightsChecksum::value() const { return fmt::format("crc32:{:08x}", crc_); }

std::string held_weights_checksum(const WanConfig& config, const torch::nn::Module& module,
                                  const std::function<bool(const std::string&)>& include) {
  std::map<std::string, at::Tensor> buffers;
  for (const auto& item : module.named_buffers(/*recurse=*/true)) buffers.emplace(item.key(), item.value());
  WeightsChecksum checksum(config);
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (include && !include(item.key())) continue;
    const auto& value = item.value();
    checksum.add(item.key(), value.scalar_type() == at::kFloat8_e4m3fn
                                 ? nn::dequantize_fp8(value, buffers.at(item.key() + "_scale"), torch::kFloat32)
                                 : value);
  }
  return checksum.value();
}

std::string weights_checksum(const WanConfig& config, const io::NamedTensors& weights) {
  WeightsChecksum checksum(config);
  for (const auto& [name, tensor] : weights) checksum.add(name, tensor);
  return checksum.value();
}

}  // namespace wt::wan
