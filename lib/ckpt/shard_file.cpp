#include "wantrain/ckpt/shard_file.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "wantrain/ckpt/tensor_io.hpp"
#include "wantrain/io/h5.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/process.hpp"

namespace wt::ckpt {
namespace fs = std::filesystem;

std::string shard_file_name(int64_t step, int rank, int ranks) {
  return fmt::format("step-{:08d}.zero-{}-of-{}.h5", step, rank, ranks);
}

std::vector<std::string> shard_paths(const std::string& path, int64_t step, int ranks) {
  std::error_code error;
  fs::path resolved = fs::canonical(path, error);
  if (error) resolved = path;
  std::vector<std::string> out;
  for (int r = 0; r < ranks; ++r) out.push_back((resolved.parent_path() / shard_file_name(step, r, ranks)).string());
  return out;
}

void write_shard(const std::string& path, const ShardPart& part, int64_t step) {
  write_file(path, "checkpoint shard", [&](hid_t file, const std::function<void()>& between_tensors) {
    io::write_string_attribute(file, "format", kShardFormat);
    io::write_int_attribute(file, "version", 1);
    io::write_int_attribute(file, "rank", part.rank);
    io::write_int_attribute(file, "ranks", part.ranks);
    io::write_int_attribute(file, "step", step);
    io::write_string_attribute(file, "host", host_name());  // which node wrote it: forensics on a cluster
    const auto optimizer = create_group(file, "optimizer");
    // A group without an EMA (parameter_group.hpp) has no EMA slices.
    const bool with_ema =
        std::any_of(part.slices.begin(), part.slices.end(), [](const StateSlice& s) { return s.ema.defined(); });
    const io::Handle ema = with_ema ? create_group(file, "ema") : io::Handle();
    for (const auto& slice : part.slices) {
      between_tensors();
      const auto group = create_group(optimizer.get(), slice.name);
      io::write_int_attribute(group.get(), "offset", slice.offset);
      io::write_int_attribute(group.get(), "numel", slice.numel);
      io::write_int_attribute(group.get(), "step", slice.step);
      write_tensor(group.get(), "exp_avg", slice.exp_avg);
      write_tensor(group.get(), "exp_avg_sq", slice.exp_avg_sq);
      if (!slice.ema.defined()) continue;
      write_tensor(ema.get(), slice.name, slice.ema);
      const auto set = io::open_dataset(ema.get(), slice.name);
      io::write_int_attribute(set.get(), "offset", slice.offset);
      io::write_int_attribute(set.get(), "numel", slice.numel);
    }
  });
}

namespace {

int64_t numel_of(hid_t location, const std::string& name) {
  const auto set = io::open_dataset(location, name);
  int64_t n = 1;
  for (auto d : io::dims(set.get())) n *= int64_t(d);
  return n;
}

}  // namespace

StateReader::StateReader(const std::string& path) : path_(path) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  std::string where = path, object = "the file";
  try {
    const auto file = io::open_file(path);
    object = "attribute version";
    const auto version = io::read_int_attribute(file.get(), "version");
    const std::string optimizer_group = version == 1 ? "optim" : "optimizer";
    object = "/" + optimizer_group;
    if (version < kShardedVersion) {
      // The whole tensors, each one piece.
      const auto optimizer = io::open_group(file.get(), optimizer_group);
      for (const auto& name : members(optimizer.get())) {
        object = fmt::format("/{}/{}", optimizer_group, name);
        const auto group = io::open_group(optimizer.get(), name);
        steps_[name] = io::read_int_attribute(group.get(), "step");
        for (auto [kind, member] : {std::pair{Kind::ExpAvg, "exp_avg"}, std::pair{Kind::ExpAvgSq, "exp_avg_sq"}}) {
          object = fmt::format("/{}/{}/{}", optimizer_group, name, member);
          const int64_t n = numel_of(group.get(), member);
          index_[int(kind)][name].push_back({path, object, 0, n, n});
        }
        has_optimizer_ = true;
      }
      if (io::exists(file.get(), "ema")) {
        object = "/ema";
        const auto ema = io::open_group(file.get(), "ema");
        for (const auto& name : members(ema.get())) {
          object = "/ema/" + name;
          const int64_t n = numel_of(ema.get(), name);
          index_[int(Kind::Ema)][name].push_back({path, object, 0, n, n});
        }
      }
      return;
    }
    const auto optimizer = io::open_group(file.get(), "optimizer");
    object = "/optimizer attribute zero_shards";
    const int ranks = int(io::read_int_attribute(optimizer.get(), "zero_shards"));
    object = "/engine attribute step";
    const int64_t step = io::read_int_attribute(io::open_group(file.get(), "engine").get(), "step");
    has_optimizer_ = true;
    int rank = 0;
    for (const auto& shard : shard_paths(path, step, ranks)) {
      where = shard;
      object = "the file";
      if (!fs::exists(shard)) throw Error("is missing");
      const auto part = io::open_file(shard);
      object = "attribute format";
      if (io::read_string_attribute(part.get(), "format") != kShardFormat) throw Error("is not a shard file");
      for (auto [attribute, want] :
           {std::pair{"rank", int64_t(rank)}, std::pair{"ranks", int64_t(ranks)}, std::pair{"step", step}}) {
        object = fmt::format("attribute {}", attribute);
        const auto got = io::read_int_attribute(part.get(), attribute);
        if (got != want)
          throw Error(
              fmt::format("is {}, but the checkpoint {} wants {} (a shard of another checkpoint?)", got, path, want));
      }
      object = "/optimizer";
      const auto moments = io::open_group(part.get(), "optimizer");
      for (const auto& name : members(moments.get())) {
        object = "/optimizer/" + name;
        const auto group = io::open_group(moments.get(), name);
        const int64_t offset = io::read_int_attribute(group.get(), "offset");
        const int64_t numel = io::read_int_attribute(group.get(), "numel");
        steps_[name] = io::read_int_attribute(group.get(), "step");
        for (auto [kind, member] : {std::pair{Kind::ExpAvg, "exp_avg"}, std::pair{Kind::ExpAvgSq, "exp_avg_sq"}}) {
          object = fmt::format("/optimizer/{}/{}", name, member);
          index_[int(kind)][name].push_back({shard, object, offset, numel_of(group.get(), member), numel});
        }
      }
      if (io::exists(part.get(), "ema")) {
        const auto ema = io::open_group(part.get(), "ema");
        for (const auto& name : members(ema.get())) {
          object = "/ema/" + name;
          const auto set = io::open_dataset(ema.get(), name);
          index_[int(Kind::Ema)][name].push_back({shard, object, io::read_int_attribute(set.get(), "offset"),
                                                  numel_of(ema.get(), name),
                                                  io::read_int_attribute(set.get(), "numel")});
        }
      }
      ++rank;
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("checkpoint {}: {}: {}", where, object, e.what()));
  }
}

void StateReader::check(const std::vector<std::pair<std::string, int64_t>>& parameters,
                        const std::vector<std::pair<std::string, int64_t>>& ema_parameters) const {
  const bool need_ema = !ema_parameters.empty();
  if (need_ema && !has_ema()) throw UsageError(fmt::format("checkpoint {}: has no EMA, but this run keeps one", path_));
  std::map<std::string, int64_t> expected(parameters.begin(), parameters.end());
  auto check_kind = [&](Kind kind, const char* what) {
    const auto& index = index_[int(kind)];
    for (const auto& [name, numel] : expected) {
      const auto it = index.find(name);
      if (it == index.end()) throw UsageError(fmt::format("checkpoint {}: {} of {} is missing", path_, what, name));
      auto pieces = it->second;
      std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
      int64_t covered = 0;
      for (const auto& p : pieces) {
        if (p.numel != numel)
          throw UsageError(fmt::format("checkpoint {}: {} of {} has {} elements, the model's parameter {}", p.file,
                                       what, name, p.numel, numel));
        if (p.offset != covered)
          throw UsageError(fmt::format("checkpoint {}: {} of {}: the slices {} element {} (at {} in {})", path_, what,
                                       name, p.offset < covered ? "overlap at" : "leave a gap before", p.offset,
                                       p.dataset, p.file));
        covered += p.count;
      }
      if (covered != numel)
        throw UsageError(fmt::format("checkpoint {}: {} of {}: the slices cover {} of {} elements", path_, what, name,
                                     covered, numel));
    }
    for (const auto& [name, pieces] : index)
      if (!expected.count(name))
        throw UsageError(fmt::format("checkpoint {}: {} {} is not a parameter of this model ({})", path_, what, name,
                                     pieces.front().file));
  };
  if (has_optimizer_) {
    check_kind(Kind::ExpAvg, "optimizer exp_avg");
    check_kind(Kind::ExpAvgSq, "optimizer exp_avg_sq");
  }
  if (!need_ema) return;
  expected = {ema_parameters.begin(), ema_parameters.end()};  // the averaged parameters only
  check_kind(Kind::Ema, "EMA");
}

at::Tensor StateReader::read(Kind kind, const std::string& name, int64_t offset, int64_t count) const {
  auto out = torch::zeros({count}, torch::kFloat32);  // [count]
  const auto& pieces = index_[int(kind)].at(name);
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  for (const auto& p : pieces) {
    const int64_t begin = std::max(offset, p.offset), end = std::min(offset + count, p.offset + p.count);
    if (begin >= end) continue;
    try {
      // Only the rows that hold this range: a rank reads its share, not the tensor.
      const auto file = io::open_file(p.file);
      int64_t first = 0;
      const auto values = read_rows_covering(file.get(), p.dataset, begin - p.offset, end - p.offset, first);
      out.narrow(0, begin - offset, end - begin).copy_(values.narrow(0, begin - p.offset - first, end - begin));
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("checkpoint {}: {}: {}", p.file, p.dataset, e.what()));
    }
  }
  return out;
}

int64_t StateReader::step(const std::string& name) const { return steps_.at(name); }

}  // namespace wt::ckpt
