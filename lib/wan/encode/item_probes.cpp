#include "wantrain/wan/encode/item_probes.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/progress.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/encoders/prompt_text.hpp"

namespace wt::wan {
namespace fs = std::filesystem;
namespace {

ItemProbe probe_one(const data::MediaItem& item, const media::MediaLimits& limits, double fps) {
  ItemProbe p;
  p.problem = caption_problem(item);
  if (!p.problem.empty()) return p;
  try {
    const auto info = media::probe_media(item.media, limits);
    p.width = info.width;
    p.height = info.height;
    p.still = info.still;
    p.frames = int64_t(media::resample_frames(info.times, fps).size());
  } catch (const UsageError& e) {
    p.problem = without_path(e.what(), item.media);
  }
  return p;
}

nlohmann::json to_json(const ItemProbe& p) {
  if (!p.problem.empty()) return {{"problem", p.problem}};
  return {{"width", p.width}, {"height", p.height}, {"still", p.still}, {"frames", p.frames}};
}

ItemProbe from_json(const nlohmann::json& j) {
  ItemProbe p;
  if (j.contains("problem")) {
    p.problem = j.at("problem").get<std::string>();
    return p;
  }
  p.width = j.at("width").get<int>();
  p.height = j.at("height").get<int>();
  p.still = j.at("still").get<bool>();
  p.frames = j.at("frames").get<int64_t>();
  return p;
}

// How a resumed job knows its listing: each item's file, absolute.
std::string media_key(const data::MediaItem& item) {
  return item.media.empty() ? "" : fs::absolute(item.media).lexically_normal().string();
}

// A resumed job's probes, from the first run's record of them.
std::vector<ItemProbe> read_probes(const std::string& text, const std::string& path,
                                   const std::vector<data::MediaItem>& items) {
  std::vector<ItemProbe> probes;
  try {
    const auto record = parse_json(text);
    const auto& listed = record.at("items");
    if (listed.size() != items.size())
      throw UsageError(
          fmt::format("{}: the listing held {} items when this job began, {} now: encode into another "
                      "--out, or list the same items",
                      path, listed.size(), items.size()));
    for (size_t i = 0; i < items.size(); ++i) {
      const auto then = listed[i].at("media").get<std::string>();
      if (then != media_key(items[i]))
        throw UsageError(
            fmt::format("{}: item {} ({}) was {} when this job began: encode into another --out, or "
                        "list the same items",
                        path, i, items[i].origin, then.empty() ? "(no file)" : then));
      probes.push_back(from_json(listed[i].at("probe")));
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: not the item record of a wandata encode run ({})", path, e.what()));
  }
  return probes;
}

}  // namespace

std::string caption_problem(const data::MediaItem& item) {
  if (!item.problem.empty()) return item.problem;
  if (!item.caption) return "no caption";
  if (!is_valid_utf8(*item.caption)) return "its caption is not UTF-8";
  if (item.caption->find_first_not_of(" \t\r\n") == std::string::npos) return "its caption is empty";
  return {};
}

std::string without_path(const std::string& message, const std::string& path) {
  const std::string prefix = path + ": ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

std::optional<std::vector<ItemProbe>> recorded_probes(const std::vector<data::MediaItem>& items, const std::string& out,
                                                      distributed::World& world) {
  const std::string path = (fs::path(out) / "items.json").string();
  // Rank 0 alone looks, so that every rank takes the same branch.
  std::string text;
  if (world.is_root() && fs::exists(path)) text = read_whole_file(path);
  world.broadcast(text);
  if (text.empty()) return std::nullopt;
  std::vector<ItemProbe> probes;
  world.agree([&] { probes = read_probes(text, path, items); });
  return probes;
}

std::vector<ItemProbe> probe_items(const std::vector<data::MediaItem>& items, const media::MediaLimits& limits,
                                   double fps, distributed::World& world) {
  nlohmann::json mine = nlohmann::json::array();
  {
    Progress progress("probe", (int64_t(items.size()) - world.rank() + world.size() - 1) / world.size());
    for (size_t i = size_t(world.rank()); i < items.size(); i += size_t(world.size())) {
      mine.push_back({{"item", i}, {"probe", to_json(probe_one(items[i], limits, fps))}});
      progress.advance();
    }
  }
  // Ranks may probe for very different times (a share of long videos on a
  // slow file system): the gather waits past the comm timeout, as the
  // encoder's closing barrier does. A rank that fails ends the job instead.
  const auto timeout = world.timeout();
  world.set_timeout(std::chrono::hours(24 * 7));
  const auto gathered = world.all_gather(mine.dump(), "all_gather (the items' probes)");
  world.set_timeout(timeout);
  std::vector<ItemProbe> probes(items.size());
  for (const auto& text : gathered)
    for (const auto& entry : nlohmann::json::parse(text))
      probes[entry.at("item").get<size_t>()] = from_json(entry.at("probe"));
  return probes;
}

void record_probes(const std::vector<data::MediaItem>& items, const std::vector<ItemProbe>& probes,
                   const std::string& out) {
  // One item a line: readable, and small for a listing of millions.
  std::string text = "{\"items\": [";
  for (size_t i = 0; i < items.size(); ++i)
    text +=
        (i ? ",\n  " : "\n  ") + nlohmann::json{{"media", media_key(items[i])}, {"probe", to_json(probes[i])}}.dump();
  write_file_durably((fs::path(out) / "items.json").string(), text + "\n]}\n");
}

}  // namespace wt::wan
