#include "wantrain/train/job_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "wantrain/data/sampler.hpp"
#include "wantrain/util/error.hpp"

namespace wt::train {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

// What a rank found in a shard, for the others (the path is theirs to make).
json to_json(const data::ShardInfo& info) {
  const auto& s = info.shape;
  return {{"name", file_name(info.path)},
          {"samples", info.samples},
          {"latents", {s.channels, s.frames, s.height, s.width}},
          {"text", {s.text_len, s.text_dim}},
          {"stored", {data::to_string(s.latents), data::to_string(s.text)}},
          {"condition", {s.condition_channels, s.clip_tokens, s.clip_dim}},
          {"vace", {s.vace_channels, s.vace_references}},
          {"has_prompt", info.has_prompt},
          {"version", info.version}};
}

data::ShardInfo from_json(const json& j, const std::string& directory) {
  data::ShardInfo info;
  info.path = (fs::path(directory) / j.at("name").get<std::string>()).string();
  info.samples = j.at("samples").get<int64_t>();
  auto& s = info.shape;
  const auto& l = j.at("latents");
  s.channels = l.at(0), s.frames = l.at(1), s.height = l.at(2), s.width = l.at(3);
  s.text_len = j.at("text").at(0), s.text_dim = j.at("text").at(1);
  s.latents = data::parse_stored(j.at("stored").at(0).get<std::string>());
  s.text = data::parse_stored(j.at("stored").at(1).get<std::string>());
  const auto& c = j.at("condition");  // y's Cy, clip_fea's T and D: 0 without
  s.condition_channels = c.at(0), s.clip_tokens = c.at(1), s.clip_dim = c.at(2);
  const auto& v = j.at("vace");  // vace_context's Cv and R: 0 without
  s.vace_channels = v.at(0), s.vace_references = v.at(1);
  info.has_prompt = j.at("has_prompt");
  info.version = j.at("version");
  return info;
}

std::string joined_names(const std::vector<std::string>& paths) {
  std::string out;
  for (const auto& p : paths) out += file_name(p) + "\n";
  return out;
}

// The names in wandata stage's list of the whole dataset's shards, one per
// line ("" when there is none): a shard that never reached any node is then
// still missed, by the rank that should read it.
std::string read_shard_list(const std::string& directory) {
  const fs::path path = fs::path(directory) / data::kStagedShardList;
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  // A list of file names: a file this large is not one (nor read into memory).
  constexpr std::uintmax_t kMostBytes = 64u << 20;
  if (const auto bytes = fs::file_size(path, ec); !ec && bytes > kMostBytes)
    throw UsageError(fmt::format("data: {} is {} bytes, not a list of shard names", path.string(), bytes));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw UsageError(fmt::format("data: cannot read {}", path.string()));
  std::string names;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
    if (line.empty() || line[0] == '#') continue;
    // Names of files in this directory only: nothing else is opened through the list.
    if (line.find('/') != std::string::npos || fs::path(line).extension() != ".h5")
      throw UsageError(fmt::format("data: {}: '{}' is not a shard's file name (NAME.h5)", path.string(), line));
    names += line + "\n";
  }
  return names;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// Without shard affinity: every rank opens the whole dataset, as on shared
// storage; the ranks compare what they found (a short digest; the details
// only when they differ, to name the first shard that does).
data::Dataset open_everywhere(const distributed::World& world, const std::string& directory, const std::string& where) {
  std::optional<data::Dataset> dataset;
  world.agree([&] {
    dataset = data::Dataset::open(directory);
    // wandata stage's list names the whole dataset: each rank must hold all of it, as it reads all of it.
    std::set<std::string> held;
    for (const auto& info : dataset->shards()) held.insert(file_name(info.path));
    for (const auto& name : split_names(read_shard_list(directory)))
      if (held.count(name) == 0)
        throw UsageError(fmt::format("data: {} lacks {} of {}, which its {} lists: {}", where, name, directory,
                                     data::kStagedShardList,
                                     world.size() == 1 ? std::string("one rank reads every shard")
                                                       : fmt::format("without {} every rank reads every shard; with "
                                                                     "node-local copies of part of the data, pass it",
                                                                     setting_reference("shard_affinity"))));
  });
  json view = json::array();
  for (const auto& info : dataset->shards()) view.push_back(to_json(info));
  const std::string text = view.dump(-1, ' ', false, json::error_handler_t::replace);
  const auto digests =
      world.all_gather(std::to_string(std::hash<std::string>{}(text)), "all_gather (the dataset each rank sees)");
  if (std::all_of(digests.begin(), digests.end(), [&](const std::string& d) { return d == digests[0]; }))
    return std::move(*dataset);
  const auto views = world.all_gather(text, "all_gather (the shards each rank sees)");
  world.agree([&] {
    const json first = json::parse(views[0]), here = json::parse(views[static_cast<size_t>(world.rank())]);
    if (here == first) return;
    std::set<std::string> theirs, ours;
    for (const auto& j : first) theirs.insert(j.at("name").get<std::string>());
    for (const auto& j : here) ours.insert(j.at("name").get<std::string>());
    for (const auto& name : theirs)
      if (ours.count(name) == 0)
        throw UsageError(
            fmt::format("data: {} lacks {} of {}, which rank 0 has: without {} every rank reads every shard; "
                        "with node-local copies of part of the data, pass it",
                        where, name, directory, setting_reference("shard_affinity")));
    for (const auto& j : here) {
      const auto it =
          std::find_if(first.begin(), first.end(), [&](const json& f) { return f.at("name") == j.at("name"); });
      if (it == first.end())
        throw UsageError(fmt::format("data: {} has {} in {}, which rank 0 does not: the nodes hold different datasets",
                                     where, j.at("name").get<std::string>(), directory));
      if (*it != j)
        throw UsageError(
            fmt::format("data: {} of {} differs between rank 0 ({} samples) and {} ({} samples, or "
                        "another shape): the nodes hold different copies",
                        j.at("name").get<std::string>(), directory, it->at("samples").get<int64_t>(), where,
                        j.at("samples").get<int64_t>()));
    }
  });
  throw Error("open_job_dataset: the ranks' digests differ but their datasets agree");
}

}  // namespace

data::Dataset open_job_dataset(const distributed::World& world, const std::string& directory, bool shard_affinity) {
  const int W = world.size(), me = world.rank();
  const std::string where = fmt::format("rank {} on {}", me, world.host());
  if (!shard_affinity || W == 1) return open_everywhere(world, directory, where);

  // With shard affinity. 1. What each rank holds, and the shard lists that
  // wandata stage left beside them: together, the names of the job's shards.
  std::vector<std::string> mine;
  std::string listed;
  world.agree([&] {
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) return;  // a node may hold none of the shards
    try {
      for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".h5") mine.push_back(it->path().string());
      if (ec) throw UsageError(fmt::format("data: cannot list {}: {}", directory, ec.message()));
      listed = read_shard_list(directory);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{} (on {})", e.what(), where));  // node-local: which node's
    }
  });
  const auto listings = world.all_gather(joined_names(mine) + listed, "all_gather (the shards each rank holds)");
  std::set<std::string> all_names;
  for (const auto& listing : listings)
    for (auto& name : split_names(listing)) all_names.insert(std::move(name));
  const std::vector<std::string> names(all_names.begin(), all_names.end());  // sorted, as open() lists them
  std::set<std::string> held;
  for (const auto& p : mine) held.insert(file_name(p));

  // 2. The shards this rank reads, inspected here, and only those.
  std::string found_text;
  world.agree([&] {
    json found = json::array();
    if (names.empty()) throw UsageError(fmt::format("data: {} holds no shards (*.h5) on any node", directory));
    for (size_t s = 0; s < names.size(); ++s) {
      if (data::shard_affinity_rank(static_cast<int64_t>(s), W) != me) continue;
      if (held.count(names[s]) == 0)
        throw UsageError(
            fmt::format("data: with {} {} reads shards {}, {}, ... of the {} that the nodes hold in {} together, "
                        "but shard {} ({}) is not there: wandata stage copies each node's shards",
                        setting_reference("shard_affinity"), where, me, me + W, names.size(), directory, s, names[s]));
      found.push_back(to_json(data::inspect_shard((fs::path(directory) / names[s]).string())));
    }
    found_text = found.dump(-1, ' ', false, json::error_handler_t::replace);
  });

  // 3. Shard s as its reader found it, on every rank.
  const auto views = world.all_gather(found_text, "all_gather (the shards each rank inspected)");
  std::optional<data::Dataset> dataset;
  world.agree([&] {
    std::vector<json> parsed;
    for (const auto& v : views) parsed.push_back(json::parse(v));
    std::vector<data::ShardInfo> shards;
    std::vector<size_t> next(static_cast<size_t>(W), 0);
    for (size_t s = 0; s < names.size(); ++s) {
      const auto reader = static_cast<size_t>(data::shard_affinity_rank(static_cast<int64_t>(s), W));
      shards.push_back(from_json(parsed[reader].at(next[reader]++), directory));
    }
    dataset = data::Dataset::checked(directory, std::move(shards));
  });
  return std::move(*dataset);
}

}  // namespace wt::train
