// Model weights in and out of safetensors: one file, or a Hugging Face
// `*.safetensors.index.json` naming several, or in from a torch.save state
// dict (.pth); official Wan names or diffusers names (mapped on load). Loading is checked in full before anything is
// copied, so a mismatched file leaves the model as it was.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/io/pth.hpp"
#include "wantrain/io/safetensors.hpp"

namespace torch::nn {
class Module;
}

namespace wt::wan {

// The tensors of one safetensors file or of all files of an index, by name.
class WeightFiles {
 public:
  // `path` is a .safetensors file or a .json index. UsageError naming the
  // file for a bad header, a bad index, a missing file, or a tensor the index
  // names that its file lacks.
  static WeightFiles open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  const io::SafetensorsEntry& entry(const std::string& name) const;
  at::Tensor read(const std::string& name) const;  // CPU, stored dtype

 private:
  std::string path_;
  std::vector<io::SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, const io::SafetensorsEntry*>> tensors_;  // name -> (file, entry)
};

// Named tensors read one at a time, by official Wan name: what loading and
// projection take, so that no second copy of a whole model is ever held.
struct TensorSource {
  std::string path;                                    // where they come from, for messages
  bool diffusers_names = false;                        // the file's own names are diffusers' (mapped to official ones)
  std::map<std::string, std::vector<int64_t>> shapes;  // official name -> shape
  std::map<std::string, std::string> stored_names;     // official name -> the file's name, where they differ
  std::function<at::Tensor(const std::string& name)> read;  // one tensor, CPU, its stored dtype
};

// A safetensors file or index, or a .pth/.pt state dict written by
// torch.save (read by io::PthFile, which runs no code from it), as a
// TensorSource; or a diffusers folder (diffusers_folder.hpp: the
// transformer's, or a pipeline's root), its transformer's weights.
// UsageError as WeightFiles::open or PthFile::open, and naming both when two
// tensors name one parameter.
TensorSource open_weights(const std::string& path);
// Whether open_weights reads `path` as a torch.save file (.pth, .pt).
bool is_pth(const std::string& path);
// The bytes the tensors of `path` take held in `dtype`, from its header
// (nothing else is read); with `containing`, only those whose official name
// contains it (open-clip's "visual" tower of a file that holds both).
double weights_bytes(const std::string& path, at::ScalarType dtype, const std::string& containing = "");
// Tensors already in memory as a TensorSource.
TensorSource tensors_source(const io::NamedTensors& tensors, const std::string& what);

struct LoadReport {
  bool diffusers_names = false;
  std::vector<std::string> loaded, missing, unexpected, mismatched;  // mismatched: "name: file [..] vs model [..]"
  bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string summary() const;  // one line
};

enum class LoadMode { Strict, Lenient };

// Copies every tensor of `source` into the parameter of `module` with its
// (official) name, converting dtype (quantising a weight held in fp8 into
// its `<name>_scale` buffer beside it), one tensor at a time. Strict: any
// missing, unexpected or shape-mismatched tensor is a UsageError naming
// them, and nothing is copied. Lenient: copies what matches and reports the
// rest. `each` sees every tensor loaded, as read, in the module's order.
using EachTensor = std::function<void(const std::string& name, const at::Tensor& as_read)>;
LoadReport load_weights(torch::nn::Module& module, const TensorSource& source, LoadMode mode = LoadMode::Strict,
                        const EachTensor& each = {});
// The same from a safetensors file or index.
LoadReport load_weights(torch::nn::Module& module, const std::string& path, LoadMode mode = LoadMode::Strict);

// What loading `source` into parameters of these names and shapes would
// copy, miss, leave over or find of another shape; reads no tensor.
LoadReport match_weights(const std::vector<ParameterShape>& parameters, const TensorSource& source);
// Whether `source` holds exactly the parameters of a model of `config`,
// from its header alone, before any model is built: the UsageError that
// strict loading would give, without allocating the model first.
void check_weights_fit(const TensorSource& source, const WanConfig& config);

// "crc32:xxxxxxxx" over the config and each tensor's name and fp32 bytes, in
// order: what identifies a frozen model (a distillation teacher, a LoRA
// base) in checkpoints, whatever file layout or dtype it was read from.
std::string weights_checksum(const WanConfig& config, const io::NamedTensors& weights);
// The checksum of `module`'s parameters as it holds them: a weight held in
// fp8 by its dequantised values (nn/fp8_weights.hpp), one tensor at a time;
// those `include` accepts where given (a VACE branch's frozen base: every
// parameter outside the branch).
std::string held_weights_checksum(const WanConfig& config, const torch::nn::Module& module,
                                  const std::function<bool(const std::string&)>& include = {});
// The same checksum, one tensor at a time (in the model's order): a model
// loaded in bf16 is identified by the values it was read with.
class WeightsChecksum {
 public:
  explicit WeightsChecksum(const WanConfig& config);
  void add(const std::string& name, const at::Tensor& tensor);
  std::string value() const;

 private:
  unsigned long crc_;
};

enum class WeightNames { Official, Diffusers };

// Writes every parameter of `module` as `dtype` (F32, F16 or BF16), atomically,
// with `metadata` beside "format": "pt" (e.g. a few-step student's sampler).
void save_weights(const torch::nn::Module& module, const std::string& path, at::ScalarType dtype = at::kFloat,
                  WeightNames names = WeightNames::Official, const std::map<std::string, std::string>& metadata = {});

}  // namespace wt::wan
