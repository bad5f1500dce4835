#include "wantrain/ckpt/checkpoint.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "wantrain/ckpt/tensor_io.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/io/h5.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/process.hpp"
#include "wantrain/util/json.hpp"

namespace wt::ckpt {
namespace {

// A missing or unreadable path is said as such, before HDF5 would call it corrupt.
void require_readable(const std::string& path) {
  if (const auto why = unreadable_file_reason(path); !why.empty())
    throw UsageError(fmt::format("checkpoint {}: {}", path, why));
}

std::string shape_string(at::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ",")); }

// The format and version attributes; throws for another format or an unknown version.
int read_version(hid_t file, std::string& object) {
  object = "attribute format";
  const auto format = io::read_string_attribute(file, "format");
  if (format != kFormat) throw Error(fmt::format("is '{}', not a {}", format, kFormat));
  object = "attribute version";
  const auto version = io::read_int_attribute(file, "version");
  if (version < 1 || version > kShardedVersion)
    throw Error(fmt::format("is version {}; this wantrain reads versions 1 to {}", version, kShardedVersion));
  return int(version);
}

// The engine's and sampler's scalars: /engine, /engine/scaler and /sampler
// (version 2) or the /trainer group's attributes (version 1). `object` names
// what is being read, for errors.
TrainerState read_state(hid_t file, int version, std::string& object) {
  TrainerState state;
  const auto read_int = [&](hid_t group, const std::string& where, const char* name, int64_t& field) {
    object = fmt::format("{} attribute {}", where, name);
    field = io::read_int_attribute(group, name);
  };
  const auto read_double = [&](hid_t group, const std::string& where, const char* name, double& field) {
    object = fmt::format("{} attribute {}", where, name);
    field = io::read_double_attribute(group, name);
  };
  if (version == 1) {
    object = "/trainer";
    const auto trainer = io::open_group(file, "trainer");
    read_int(trainer.get(), "/trainer", "step", state.step);
    read_int(trainer.get(), "/trainer", "epoch", state.epoch);
    read_int(trainer.get(), "/trainer", "sampler_epoch", state.sampler_epoch);
    read_int(trainer.get(), "/trainer", "sampler_consumed", state.sampler_consumed);
    read_int(trainer.get(), "/trainer", "skipped", state.skipped);
    read_int(trainer.get(), "/trainer", "loss_scale_good_steps", state.loss_scale_good_steps);
    read_double(trainer.get(), "/trainer", "lr", state.lr);
    read_double(trainer.get(), "/trainer", "loss_scale", state.loss_scale);
    read_double(trainer.get(), "/trainer", "val_loss", state.val_loss);
    return state;
  }
  object = "/engine";
  const auto engine = io::open_group(file, "engine");
  read_int(engine.get(), "/engine", "step", state.step);
  read_int(engine.get(), "/engine", "skipped", state.skipped);
  read_double(engine.get(), "/engine", "lr", state.lr);
  read_double(engine.get(), "/engine", "val_loss", state.val_loss);
  object = "/engine/scaler";
  const auto scaler = io::open_group(engine.get(), "scaler");
  read_double(scaler.get(), "/engine/scaler", "loss_scale", state.loss_scale);
  read_int(scaler.get(), "/engine/scaler", "good_steps", state.loss_scale_good_steps);
  object = "/sampler";
  const auto sampler = io::open_group(file, "sampler");
  read_int(sampler.get(), "/sampler", "epoch", state.epoch);
  read_int(sampler.get(), "/sampler", "sampler_epoch", state.sampler_epoch);
  read_int(sampler.get(), "/sampler", "consumed", state.sampler_consumed);
  return state;
}

void write_rng(hid_t group, const at::Tensor& rng_cpu) {
  const auto rng = rng_cpu.defined() ? rng_cpu.contiguous() : torch::empty({0}, torch::kUInt8);
  const hsize_t n = rng.numel();
  const io::Handle space(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  const io::Handle set(
      H5_CHECK(H5Dcreate2(group, "rng_cpu", H5T_STD_U8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
      H5Dclose);
  if (n > 0) H5_CHECK(H5Dwrite(set.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng.data_ptr()));
}

at::Tensor read_rng(hid_t group) {
  const auto set = io::open_dataset(group, "rng_cpu");
  const auto dims = io::dims(set.get());
  if (dims.size() != 1) throw Error("is not one-dimensional");
  auto rng = torch::empty({int64_t(dims[0])}, torch::kUInt8);
  if (dims[0] > 0) H5_CHECK(H5Dread(set.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng.data_ptr()));
  return rng;
}

// The /objective group of a version 2 checkpoint: its kind and its state.
void read_objective_group(hid_t file, std::string& kind, std::map<std::string, std::string>& state,
                          std::string& object) {
  object = "/objective";
  const auto objective = io::open_group(file, "objective");
  for (const auto& name : attribute_names(objective.get())) {
    object = fmt::format("/objective attribute {}", name);
    const auto value = io::read_string_attribute(objective.get(), name);
    if (name == "kind")
      kind = value;
    else
      state.emplace(name, value);
  }
}

// Version 1 kept the run's identity at the root and the teacher there too.
void read_v1_root(hid_t file, Checkpoint& c, std::string& object) {
  object = "attribute world_size";
  c.world_size = int(io::read_int_attribute(file, "world_size"));
  object = "attribute run_config";
  c.run_config = io::read_string_attribute(file, "run_config");
  // The affinity was only in the stored options then.
  const auto options = parse_json_or_discarded(c.run_config);
  c.shard_affinity = options.is_object() && options.value("shard-affinity", "false") == "true";
  c.objective_kind = "flow-matching";
  if (io::has_attribute(file, "teacher")) {
    c.objective_kind = "distillation";
    for (const char* name : {"teacher", "teacher_checksum"}) {
      object = fmt::format("attribute {}", name);
      c.objective.emplace(name, io::read_string_attribute(file, name));
    }
  }
  c.state = read_state(file, 1, object);
  object = "/trainer/rng_cpu";
  c.rng_cpu = read_rng(io::open_group(file, "trainer").get());
}

}  // namespace

const GroupRecord& group_of(const std::vector<GroupRecord>& groups, const std::string& name) {
  const GroupRecord* best = nullptr;
  for (const auto& group : groups)
    if (name.rfind(group.prefix, 0) == 0 && (!best || group.prefix.size() > best->prefix.size())) best = &group;
  if (!best) throw Error(fmt::format("tensor {} belongs to none of the checkpoint's groups", name));
  return *best;
}

NamedTensors model_weights(const NamedTensors& tensors, const std::vector<GroupRecord>& groups) {
  NamedTensors out;
  for (const auto& [name, tensor] : tensors) {
    const auto& group = group_of(groups, name);
    if (group.weights) out.emplace_back(name.substr(group.prefix.size()), tensor);
  }
  return out;
}

namespace {

std::string groups_json(const std::vector<GroupRecord>& groups) {
  auto list = nlohmann::json::array();
  for (const auto& g : groups)
    list.push_back({{"name", g.name}, {"prefix", g.prefix}, {"ema", g.ema}, {"weights", g.weights}});
  return list.dump();
}

// The /model attribute groups; one group holding everything without it.
std::vector<GroupRecord> read_groups(hid_t model, bool& recorded) {
  recorded = io::has_attribute(model, "groups");
  if (!recorded) return {GroupRecord{}};
  std::vector<GroupRecord> groups;
  const auto list = nlohmann::json::parse(io::read_string_attribute(model, "groups"));
  if (!list.is_array() || list.empty()) throw Error("is not a list of groups");
  for (const auto& g : list) {
    if (!g.is_object()) throw Error("holds an entry that is not a group");
    groups.push_back({g.at("name").get<std::string>(), g.at("prefix").get<std::string>(), g.at("ema").get<bool>(),
                      g.at("weights").get<bool>()});
  }
  return groups;
}

}  // namespace

int64_t Checkpoint::tensor_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : model) bytes += t.numel() * 4;
  for (const auto& [name, t] : ema) bytes += t.numel() * 4;
  for (const auto& slot : optim) bytes += (slot.exp_avg.numel() + slot.exp_avg_sq.numel()) * 4;
  for (const auto& slice : shard.slices)
    bytes += (slice.exp_avg.numel() + slice.exp_avg_sq.numel() + (slice.ema.defined() ? slice.ema.numel() : 0)) * 4;
  return bytes;
}

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  write_file(path, "checkpoint", [&](hid_t file, const std::function<void()>& between_tensors) {
    io::write_string_attribute(file, "format", kFormat);
    const bool sharded = c.shard.ranks > 0;
    io::write_int_attribute(file, "version", sharded ? kShardedVersion : kVersion);
    io::write_string_attribute(file, "model_config", c.model_config);
    io::write_string_attribute(file, "run_options", c.run_config);
    io::write_string_attribute(file, "host", host_name());  // which node wrote it: forensics on a cluster
    {
      const auto engine = create_group(file, "engine");
      io::write_int_attribute(engine.get(), "step", c.state.step);
      io::write_int_attribute(engine.get(), "skipped", c.state.skipped);
      io::write_double_attribute(engine.get(), "lr", c.state.lr);
      io::write_double_attribute(engine.get(), "val_loss", c.state.val_loss);
      write_rng(engine.get(), c.rng_cpu);
      const auto scaler = create_group(engine.get(), "scaler");
      io::write_double_attribute(scaler.get(), "loss_scale", c.state.loss_scale);
      io::write_int_attribute(scaler.get(), "good_steps", c.state.loss_scale_good_steps);
    }
    {
      const auto sampler = create_group(file, "sampler");
      io::write_int_attribute(sampler.get(), "epoch", c.state.epoch);
      io::write_int_attribute(sampler.get(), "sampler_epoch", c.state.sampler_epoch);
      io::write_int_attribute(sampler.get(), "consumed", c.state.sampler_consumed);
      io::write_int_attribute(sampler.get(), "world_size", c.world_size);
      io::write_int_attribute(sampler.get(), "shard_affinity", c.shard_affinity);
    }
    {
      const auto objective = create_group(file, "objective");
      io::write_string_attribute(objective.get(), "kind", c.objective_kind);
      for (const auto& [name, value] : c.objective) io::write_string_attribute(objective.get(), name, value);
    }
    for (const auto& [group_name, tensors] : {std::pair{"model", &c.model}, std::pair{"ema", &c.ema}}) {
      if ((tensors->empty() || sharded) && std::string(group_name) == "ema") continue;
      const auto group = create_group(file, group_name);
      if (std::string(group_name) == "model" && c.groups.size() > 1)
        io::write_string_attribute(group.get(), "groups", groups_json(c.groups));
      for (const auto& item : *tensors) {
        between_tensors();
        write_tensor(group.get(), item.first, item.second);
      }
    }
    const auto optimizer = create_group(file, "optimizer");
    io::write_string_attribute(optimizer.get(), "kind", "adamw");
    if (sharded) {
      io::write_int_attribute(optimizer.get(), "zero_shards", c.shard.ranks);
      io::write_int_attribute(optimizer.get(), "ema", c.sharded_ema);
    }
    for (const auto& slot : c.optim) {  // empty when sharded
      between_tensors();
      const auto group = create_group(optimizer.get(), slot.name);
      io::write_int_attribute(group.get(), "step", slot.step);
      write_tensor(group.get(), "exp_avg", slot.exp_avg);
      write_tensor(group.get(), "exp_avg_sq", slot.exp_avg_sq);
    }
  });
}

namespace {

// The main file: everything but a sharded checkpoint's slices.
Checkpoint read_main_file(const std::string& path, ReadParts parts) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  require_readable(path);
  std::string object = "the file";  // what was being read, for the error
  try {
    const auto file = io::open_file(path);
    Checkpoint c;
    c.version = read_version(file.get(), object);
    object = "attribute model_config";
    c.model_config = io::read_string_attribute(file.get(), "model_config");
    if (c.version == 1) {
      read_v1_root(file.get(), c, object);
    } else {
      object = "attribute run_options";
      c.run_config = io::read_string_attribute(file.get(), "run_options");
      object = "/engine";
      const auto engine = io::open_group(file.get(), "engine");
      c.state = read_state(file.get(), 2, object);
      object = "/engine/rng_cpu";
      c.rng_cpu = read_rng(engine.get());
      object = "/sampler attribute world_size";
      const auto sampler = io::open_group(file.get(), "sampler");
      c.world_size = int(io::read_int_attribute(sampler.get(), "world_size"));
      object = "/sampler attribute shard_affinity";
      c.shard_affinity = io::read_int_attribute(sampler.get(), "shard_affinity") != 0;
      read_objective_group(file.get(), c.objective_kind, c.objective, object);
    }

    for (const auto& [group_name, tensors] : {std::pair{"model", &c.model}, std::pair{"ema", &c.ema}}) {
      object = fmt::format("/{}", group_name);
      if (std::string(group_name) == "ema" && (!parts.ema || !io::exists(file.get(), "ema"))) continue;
      const auto group = io::open_group(file.get(), group_name);
      if (std::string(group_name) == "model") {
        object = "/model attribute groups";
        c.groups = read_groups(group.get(), c.groups_recorded);
      }
      for (const auto& name : members(group.get())) {
        object = fmt::format("/{}/{}", group_name, name);
        tensors->emplace_back(name, read_tensor(group.get(), name));
      }
    }
    const std::string optimizer_group = c.version == 1 ? "optim" : "optimizer";
    object = "/" + optimizer_group;
    const auto optimizer = io::open_group(file.get(), optimizer_group);
    if (c.version > 1) {
      object = "/optimizer attribute kind";
      const auto kind = io::read_string_attribute(optimizer.get(), "kind");
      if (kind != "adamw") throw Error(fmt::format("is '{}'; this wantrain continues only AdamW", kind));
    }
    if (c.version == kShardedVersion) {
      object = "/optimizer attribute zero_shards";
      c.shard.ranks = int(io::read_int_attribute(optimizer.get(), "zero_shards"));
      object = "/optimizer attribute ema";
      c.sharded_ema = io::read_int_attribute(optimizer.get(), "ema") != 0;
      return c;
    }
    if (!parts.optimizer) return c;
    for (const auto& name : members(optimizer.get())) {
      object = fmt::format("/{}/{}", optimizer_group, name);
      const auto group = io::open_group(optimizer.get(), name);
      OptimizerSlot slot;
      slot.name = name;
      slot.step = io::read_int_attribute(group.get(), "step");
      object = fmt::format("/{}/{}/exp_avg", optimizer_group, name);
      slot.exp_avg = read_tensor(group.get(), "exp_avg");
      object = fmt::format("/{}/{}/exp_avg_sq", optimizer_group, name);
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

}  // namespace

Checkpoint read_checkpoint(const std::string& path, ReadParts parts) {
  Checkpoint c = read_main_file(path, parts);
  if (c.version != kShardedVersion || !(parts.optimizer || (parts.ema && c.sharded_ema))) return c;
  // Whole tensors gathered from the shard files, shaped like the model's.
  const StateReader reader(path);
  std::vector<std::pair<std::string, int64_t>> parameters, averaged;
  for (const auto& [name, t] : c.model) {
    parameters.emplace_back(name, t.numel());
    if (parts.ema && c.sharded_ema && group_of(c.groups, name).ema) averaged.emplace_back(name, t.numel());
  }
  reader.check(parameters, averaged);
  using Kind = StateReader::Kind;
  for (const auto& [name, t] : c.model) {
    auto whole = [&](Kind kind) { return reader.read(kind, name, 0, t.numel()).view(t.sizes()); };
    if (parts.optimizer) c.optim.push_back({name, reader.step(name), whole(Kind::ExpAvg), whole(Kind::ExpAvgSq)});
    if (parts.ema && c.sharded_ema && group_of(c.groups, name).ema) c.ema.emplace_back(name, whole(Kind::Ema));
  }
  return c;
}

WeightsContents read_weights_contents(const std::string& path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  require_readable(path);
  std::string object = "the file";
  try {
    const auto file = io::open_file(path);
    WeightsContents w;
    w.version = read_version(file.get(), object);
    w.step = read_state(file.get(), w.version, object).step;
    object = "/model";
    const auto model = io::open_group(file.get(), "model");
    object = "/model attribute groups";
    w.groups = read_groups(model.get(), w.groups_recorded);
    for (const auto& name : members(model.get())) {
      object = "/model/" + name;
      const auto set = io::open_dataset(model.get(), name);
      const auto dims = io::dims(set.get());
      w.model.emplace_back(name, std::vector<int64_t>(dims.begin(), dims.end()));
    }
    w.ema = io::exists(file.get(), "ema");
    if (w.version == kShardedVersion) {
      object = "/optimizer attribute ema";
      w.sharded_ema = io::read_int_attribute(io::open_group(file.get(), "optimizer").get(), "ema") != 0;
      w.ema = w.sharded_ema;
    }
    return w;
  } catch (const std::exception& e) {
    if (object == "the file")
      throw UsageError(
          fmt::format("checkpoint {}: not a readable HDF5 file (truncated or corrupt?): {}", path, e.what()));
    throw UsageError(fmt::format("checkpoint {}: {}: {}", path, object, e.what()));
  }
}

at::Tensor read_weight(const std::string& path, const std::string& group, const std::string& name) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  require_readable(path);
  try {
    const auto file = io::open_file(path);
    return read_tensor(io::open_group(file.get(), group).get(), name);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("checkpoint {}: /{}/{}: {}", path, group, name, e.what()));
  }
}

namespace {

// Opens `path` under the library lock and returns read(file, object): a
// failure is one UsageError naming the file and the object `read` was at.
template <class Read>
auto read_checkpoint_part(const std::string& path, Read read) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  require_readable(path);
  std::string object = "the file";
  try {
    const auto file = io::open_file(path);
    return read(file.get(), object);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("checkpoint {}: {}: {}", path, object, e.what()));
  }
}

// A string attribute of a checkpoint's root, without reading any tensor.
std::string read_root_string(const std::string& path, const char* name) {
  return read_checkpoint_part(path, [&](hid_t file, std::string& object) {
    object = "attribute format";
    const auto format = io::read_string_attribute(file, "format");
    if (format != kFormat) throw Error(fmt::format("is '{}', not a {}", format, kFormat));
    object = std::string("attribute ") + name;
    return io::read_string_attribute(file, name);
  });
}

}  // namespace

TrainerState read_trainer_state(const std::string& path) {
  return read_checkpoint_part(
      path, [](hid_t file, std::string& object) { return read_state(file, read_version(file, object), object); });
}

std::string read_model_config(const std::string& path) { return read_root_string(path, "model_config"); }

std::string read_run_options(const std::string& path) { return read_root_string(path, "run_options"); }

ObjectiveRecord read_objective(const std::string& path) {
  return read_checkpoint_part(path, [](hid_t file, std::string& object) {
    ObjectiveRecord record;
    if (read_version(file, object) == 1) return record;  // version 1 predates few-step students
    read_objective_group(file, record.kind, record.state, object);
    return record;
  });
}

void check_model_config(const std::string& saved_json, const std::string& path, const std::string& config_json,
                        const std::string& config_path) {
  const auto theirs = parse_json_or_discarded(saved_json);
  const auto ours = parse_json(config_json);
  if (theirs == ours) return;
  std::string difference = "it is not a model config";
  if (theirs.is_object())
    for (const auto& [key, value] : ours.items())
      if (!theirs.contains(key) || theirs[key] != value) {
        difference = fmt::format("{} is {} there, {} here", key,
                                 theirs.contains(key) ? json_excerpt(theirs[key]) : "absent", json_excerpt(value));
        break;
      }
  throw UsageError(fmt::format("checkpoint {}: written for another model than {}: {}", path, config_path, difference));
}

bool is_checkpoint_file(const std::string& path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  return H5Fis_hdf5(path.c_str()) > 0;
}

void check_fits(const Checkpoint& c, const std::string& path, const NamedTensors& parameters,
                const NamedTensors& ema_parameters) {
  const bool need_ema = !ema_parameters.empty();
  if (need_ema && c.ema.empty())
    throw UsageError(fmt::format("checkpoint {}: has no /ema, but this run keeps an EMA", path));
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
  if (need_ema) {  // the averaged parameters only
    const auto all = expected;
    expected.clear();
    for (const auto& [name, tensor] : ema_parameters) expected.emplace(name, tensor.sizes());
    check_group("ema", sizes_of(c.ema));
    expected = all;
  }
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
      check_group(c.version == 1 ? "optim" : "optimizer", std::string(suffix) == "/exp_avg" ? avg : avg_sq);
    }
  }
}

void copy_named(const NamedTensors& saved, const NamedTensors& into) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : into) tensor.copy_(by_name.at(name));
}

}  // namespace wt::ckpt
