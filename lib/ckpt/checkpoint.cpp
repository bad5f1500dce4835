#include "wantrain/ckpt/checkpoint.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "wantrain/io/h5.hpp"
#include "wantrain/util/error.hpp"

namespace wt::ckpt {
namespace {

std::string shape_string(at::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ",")); }

// One float32 tensor as a dataset of its shape (a scalar dataspace for 0-d).
void write_tensor(hid_t location, const std::string& name, const at::Tensor& tensor) {
  const auto data = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const std::vector<hsize_t> dims(data.sizes().begin(), data.sizes().end());
  const io::Handle space(
      H5_CHECK(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr)),
      H5Sclose);
  const io::Handle set(
      H5_CHECK(H5Dcreate2(location, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
      H5Dclose);
  H5_CHECK(H5Dwrite(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data_ptr()));
}

// A float32 dataset (any stored float type is converted by HDF5).
at::Tensor read_tensor(hid_t location, const std::string& name) {
  const auto set = io::open_dataset(location, name);
  const auto type = io::dataset_type(set.get());
  if (H5Tget_class(type.get()) != H5T_FLOAT) throw Error("not a floating-point dataset");
  const auto dims = io::dims(set.get());
  const std::vector<int64_t> sizes(dims.begin(), dims.end());
  auto out = torch::empty(sizes, torch::kFloat32);
  H5_CHECK(H5Dread(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()));
  return out;
}

io::Handle create_group(hid_t location, const std::string& name) {
  return io::Handle(H5_CHECK(H5Gcreate2(location, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
}
io::Handle open_group(hid_t location, const std::string& name) {
  return io::Handle(H5_CHECK(H5Gopen2(location, name.c_str(), H5P_DEFAULT)), H5Gclose);
}

// The names of the links directly under a group, in HDF5's (name) order.
std::vector<std::string> members(hid_t group) {
  std::vector<std::string> names;
  H5_CHECK(H5Literate(
      group, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
        try {  // nothing may unwind through HDF5's C frames
          static_cast<std::vector<std::string>*>(out)->emplace_back(name);
          return 0;
        } catch (...) {
          return -1;
        }
      },
      &names));
  return names;
}

const char* const kStateInts[] = {
    "step", "epoch", "sampler_epoch", "sampler_consumed", "skipped", "loss_scale_good_steps"};

// The /trainer group's attributes; `object` names what is being read, for errors.
TrainerState read_state(hid_t trainer, std::string& object) {
  TrainerState state;
  int64_t* ints[] = {&state.step,          &state.epoch,
                     &state.sampler_epoch, &state.sampler_consumed,
                     &state.skipped,       &state.loss_scale_good_steps};
  for (size_t i = 0; i < std::size(kStateInts); ++i) {
    object = fmt::format("/trainer attribute {}", kStateInts[i]);
    *ints[i] = io::read_int_attribute(trainer, kStateInts[i]);
  }
  for (const auto& [name, field] : {std::pair{"lr", &state.lr}, std::pair{"loss_scale", &state.loss_scale},
                                    std::pair{"val_loss", &state.val_loss}}) {
    object = fmt::format("/trainer attribute {}", name);
    *field = io::read_double_attribute(trainer, name);
  }
  return state;
}

}  // namespace

int64_t Checkpoint::tensor_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : model) bytes += t.numel() * 4;
  for (const auto& [name, t] : ema) bytes += t.numel() * 4;
  for (const auto& slot : optim) bytes += (slot.exp_avg.numel() + slot.exp_avg_sq.numel()) * 4;
  return bytes;
}

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  std::unique_lock<std::mutex> lock(io::library_mutex());
  io::quiet_errors();
  io::Handle file;
  // Tensor by tensor, letting the Loader's reads in between; the handles
  // are closed under the lock, also when unwinding.
  auto each_unlocked = [&](auto&& write_one) {
    lock.unlock();
    lock.lock();
    write_one();
  };
  try {
    file = io::create_file(path);
    io::write_string_attribute(file.get(), "format", kFormat);
    io::write_int_attribute(file.get(), "version", kVersion);
    io::write_int_attribute(file.get(), "world_size", c.world_size);
    io::write_string_attribute(file.get(), "run_config", c.run_config);
    io::write_string_attribute(file.get(), "model_config", c.model_config);
    if (!c.teacher.empty()) {
      io::write_string_attribute(file.get(), "teacher", c.teacher);
      io::write_string_attribute(file.get(), "teacher_checksum", c.teacher_checksum);
    }
    {
      const auto trainer = create_group(file.get(), "trainer");
      const int64_t ints[] = {c.state.step,          c.state.epoch,
                              c.state.sampler_epoch, c.state.sampler_consumed,
                              c.state.skipped,       c.state.loss_scale_good_steps};
      for (size_t i = 0; i < std::size(kStateInts); ++i) io::write_int_attribute(trainer.get(), kStateInts[i], ints[i]);
      io::write_double_attribute(trainer.get(), "lr", c.state.lr);
      io::write_double_attribute(trainer.get(), "loss_scale", c.state.loss_scale);
      io::write_double_attribute(trainer.get(), "val_loss", c.state.val_loss);
      const auto rng = c.rng_cpu.defined() ? c.rng_cpu.contiguous() : torch::empty({0}, torch::kUInt8);
      const hsize_t n = rng.numel();
      const io::Handle space(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
      const io::Handle set(H5_CHECK(H5Dcreate2(trainer.get(), "rng_cpu", H5T_STD_U8LE, space.get(), H5P_DEFAULT,
                                               H5P_DEFAULT, H5P_DEFAULT)),
                           H5Dclose);
      if (n > 0) H5_CHECK(H5Dwrite(set.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng.data_ptr()));
    }
    for (const auto& [group_name, tensors] : {std::pair{"model", &c.model}, std::pair{"ema", &c.ema}}) {
      if (tensors->empty() && std::string(group_name) == "ema") continue;
      const auto group = create_group(file.get(), group_name);
      for (const auto& item : *tensors) each_unlocked([&] { write_tensor(group.get(), item.first, item.second); });
    }
    const auto optim = create_group(file.get(), "optim");
    for (const auto& slot : c.optim) {
      each_unlocked([&] {
        const auto group = create_group(optim.get(), slot.name);
        io::write_int_attribute(group.get(), "step", slot.step);
        write_tensor(group.get(), "exp_avg", slot.exp_avg);
        write_tensor(group.get(), "exp_avg_sq", slot.exp_avg_sq);
      });
    }
    H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL));
    file.reset();
  } catch (const std::exception& e) {
    if (!lock.owns_lock()) lock.lock();
    file.reset();
    throw Error(fmt::format("checkpoint {}: cannot write: {}", path, e.what()));
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  std::string object = "the file";  // what was being read, for the error
  try {
    const auto file = io::open_file(path);
    Checkpoint c;
    object = "attribute format";
    const auto format = io::read_string_attribute(file.get(), "format");
    if (format != kFormat) throw Error(fmt::format("is '{}', not a {}", format, kFormat));
    object = "attribute version";
    const auto version = io::read_int_attribute(file.get(), "version");
    if (version != kVersion)
      throw Error(fmt::format("is version {}; this wantrain reads version {}", version, kVersion));
    object = "attribute world_size";
    c.world_size = int(io::read_int_attribute(file.get(), "world_size"));
    object = "attribute run_config";
    c.run_config = io::read_string_attribute(file.get(), "run_config");
    object = "attribute model_config";
    c.model_config = io::read_string_attribute(file.get(), "model_config");
    if (io::has_attribute(file.get(), "teacher")) {
      object = "attribute teacher";
      c.teacher = io::read_string_attribute(file.get(), "teacher");
      object = "attribute teacher_checksum";
      c.teacher_checksum = io::read_string_attribute(file.get(), "teacher_checksum");
    }

    object = "/trainer";
    const auto trainer = open_group(file.get(), "trainer");
    c.state = read_state(trainer.get(), object);
    object = "/trainer/rng_cpu";
    {
      const auto set = io::open_dataset(trainer.get(), "rng_cpu");
      const auto dims = io::dims(set.get());
      if (dims.size() != 1) throw Error("is not one-dimensional");
      c.rng_cpu = torch::empty({int64_t(dims[0])}, torch::kUInt8);
      if (dims[0] > 0)
        H5_CHECK(H5Dread(set.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.rng_cpu.data_ptr()));
    }

    for (const auto& [group_name, tensors] : {std::pair{"model", &c.model}, std::pair{"ema", &c.ema}}) {
      object = fmt::format("/{}", group_name);
      if (std::string(group_name) == "ema" && !io::exists(file.get(), "ema")) continue;
      const auto group = open_group(file.get(), group_name);
      for (const auto& name : members(group.get())) {
        object = fmt::format("/{}/{}", group_name, name);
        tensors->emplace_back(name, read_tensor(group.get(), name));
      }
    }
    object = "/optim";
    const auto optim = open_group(file.get(), "optim");
    for (const auto& name : members(optim.get())) {
      object = fmt::format("/optim/{}", name);
      const auto group = open_group(optim.get(), name);
      OptimizerSlot slot;
      slot.name = name;
      slot.step = io::read_int_attribute(group.get(), "step");
      object = fmt::format("/optim/{}/exp_avg", name);
      slot.exp_avg = read_tensor(group.get(), "exp_avg");
      object = fmt::format("/optim/{}/exp_avg_sq", name);
      slot.exp_avg_sq = read_tensor(group.get(), "exp_avg_sq");
      c.optim.push_back(std::move(slot));
    }
    return c;
  } catch (const std::exception& e) {
    if (object == "the file")
      throw UsageError(
          fmt::format("checkpoint {}: not a readable HDF5 file (truncated or corrupt?): {}", path, e.what()));
    throw UsageError(fmt::format("checkpoint {}: {}: {}", path, object, e.what()));
  }
}

TrainerState read_trainer_state(const std::string& path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  std::string object = "/trainer";
  try {
    const auto file = io::open_file(path);
    const auto trainer = open_group(file.get(), "trainer");
    return read_state(trainer.get(), object);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("checkpoint {}: {}: {}", path, object, e.what()));
  }
}

std::string read_model_config(const std::string& path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  std::string object = "the file";
  try {
    const auto file = io::open_file(path);
    object = "attribute format";
    const auto format = io::read_string_attribute(file.get(), "format");
    if (format != kFormat) throw Error(fmt::format("is '{}', not a {}", format, kFormat));
    object = "attribute model_config";
    return io::read_string_attribute(file.get(), "model_config");
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("checkpoint {}: {}: {}", path, object, e.what()));
  }
}

void check_model_config(const std::string& saved_json, const std::string& path, const std::string& config_json,
                        const std::string& config_path) {
  const auto theirs = nlohmann::json::parse(saved_json, nullptr, false);
  const auto ours = nlohmann::json::parse(config_json);
  if (theirs == ours) return;
  std::string difference = "it is not a model config";
  if (theirs.is_object())
    for (const auto& [key, value] : ours.items())
      if (!theirs.contains(key) || theirs[key] != value) {
        difference = fmt::format("{} is {} there, {} here", key, theirs.contains(key) ? theirs[key].dump() : "absent",
                                 value.dump());
        break;
      }
  throw UsageError(fmt::format("checkpoint {}: written for another model than {}: {}", path, config_path, difference));
}

bool is_checkpoint_file(const std::string& path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  return H5Fis_hdf5(path.c_str()) > 0;
}

void check_fits(const Checkpoint& c, const std::string& path, const NamedTensors& parameters, bool need_ema) {
  if (need_ema && c.ema.empty())
    throw UsageError(fmt::format("checkpoint {}: has no /ema, but this run keeps an EMA (--ema-decay)", path));
  const bool has_optim = !c.optim.empty();
  std::map<std::string, at::IntArrayRef> expected;
  for (const auto& [name, tensor] : parameters) expected.emplace(name, tensor.sizes());

  auto check_group = [&](const std::string& group, const std::vector<std::pair<std::string, at::IntArrayRef>>& found) {
    std::map<std::string, at::IntArrayRef> by_name(found.begin(), found.end());
    for (const auto& [name, sizes] : expected) {
      const auto it = by_name.find(name);
      if (it == by_name.end())
        throw UsageError(fmt::format("checkpoint {}: tensor /{}/{} is missing", path, group, name));
      if (it->second != sizes)
        throw UsageError(fmt::format("checkpoint {}: tensor /{}/{} has shape {}, the model's is {}", path, group, name,
                                     shape_string(it->second), shape_string(sizes)));
    }
    for (const auto& [name, sizes] : by_name)
      if (!expected.count(name))
        throw UsageError(
            fmt::format("checkpoint {}: tensor /{}/{} is not a parameter of this model", path, group, name));
  };
  auto sizes_of = [](const NamedTensors& tensors) {
    std::vector<std::pair<std::string, at::IntArrayRef>> out;
    for (const auto& [name, t] : tensors) out.emplace_back(name, t.sizes());
    return out;
  };
  check_group("model", sizes_of(c.model));
  if (need_ema) check_group("ema", sizes_of(c.ema));
  if (has_optim) {
    std::vector<std::pair<std::string, at::IntArrayRef>> avg, avg_sq;
    for (const auto& slot : c.optim) {
      avg.emplace_back(slot.name + "/exp_avg", slot.exp_avg.sizes());
      avg_sq.emplace_back(slot.name + "/exp_avg_sq", slot.exp_avg_sq.sizes());
    }
    // Names are compared with their member suffix, so the error names the tensor.
    std::map<std::string, at::IntArrayRef> saved = std::move(expected);
    for (const auto& suffix : {"/exp_avg", "/exp_avg_sq"}) {
      expected.clear();
      for (const auto& [name, sizes] : saved) expected.emplace(name + suffix, sizes);
      check_group("optim", std::string(suffix) == "/exp_avg" ? avg : avg_sq);
    }
  }
}

void copy_named(const NamedTensors& saved, const NamedTensors& into) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : into) tensor.copy_(by_name.at(name));
}

}  // namespace wt::ckpt
