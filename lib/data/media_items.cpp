#include "wantrain/data/media_items.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <cctype>
#include <map>
#include <set>

#include "wantrain/data/csv_table.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"

namespace wt::data {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// A path as listed, against the listing's folder when relative.
std::string resolve(const fs::path& base, const std::string& listed) {
  const fs::path p(listed);
  return (p.is_absolute() ? p : base / p).lexically_normal().string();
}

// The control part a file name says it is beside its clip: STEM.control.EXT
// (the control video), STEM.mask.EXT (its mask), STEM.ref.EXT or
// STEM.refN.EXT (reference pictures); "" for any other name. `stem` gets
// the clip's stem.
std::string control_part(const fs::path& file, std::string& stem) {
  const std::string base = file.stem().string();  // "walk.control" of "walk.control.mp4"
  const auto dot = base.rfind('.');
  if (dot == std::string::npos || dot == 0) return "";
  const std::string part = base.substr(dot + 1);
  stem = base.substr(0, dot);
  if (part == "control" || part == "mask") return part;
  if (part.rfind("ref", 0) == 0 &&
      std::all_of(part.begin() + 3, part.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
    return "ref";
  return "";
}

std::vector<MediaItem> list_folder(const fs::path& dir, const MediaListOptions& options) {
  std::vector<fs::path> listed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && is_media_name(it->path().filename().string())) listed.push_back(it->path());
  if (ec) throw UsageError(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
  std::sort(listed.begin(), listed.end());
  // A clip's control files (walk.control.mp4, walk.mask.mp4, walk.ref.png
  // beside walk.mp4) are part of its item, not items of their own.
  std::set<std::string> stems;
  for (const auto& f : listed) stems.insert(f.stem().string());
  std::vector<fs::path> files;
  std::map<std::string, std::vector<std::pair<std::string, fs::path>>> controls;  // stem -> (part, file)
  for (const auto& f : listed) {
    std::string stem;
    const std::string part = options.control_files ? control_part(f, stem) : std::string();
    if (!part.empty() && stems.count(stem))
      controls[stem].emplace_back(part, f);
    else
      files.push_back(f);
  }
  if (files.empty())
    throw UsageError(fmt::format("{}: holds no video or image (looked for {})", dir.string(),
                                 "mp4 mkv webm mov avi gif m4v mpg mpeg ts wmv flv png jpg jpeg webp bmp tif tiff"));
  std::sort(files.begin(), files.end());
  std::vector<MediaItem> items;
  for (const auto& f : files) {
    MediaItem item;
    item.media = f.string();
    item.origin = f.string();
    fs::path caption = f;
    caption.replace_extension(options.caption_extension);
    if (fs::is_regular_file(caption, ec)) item.caption = read_whole_file(caption.string());
    for (const auto& [part, file] : controls[f.stem().string()]) {
      std::string& slot = part == "control" ? item.control : item.mask;
      if (part == "ref") {
        item.references.push_back(file.string());
      } else if (!slot.empty()) {
        item.problem = fmt::format("two {} files beside it: {} and {}", part, slot, file.string());
      } else {
        slot = file.string();
      }
    }
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<MediaItem> list_csv(const fs::path& path) {
  const CsvText table = read_csv_text(path.string());
  const auto has = [&](const char* name) {
    return std::find(table.columns.begin(), table.columns.end(), name) != table.columns.end();
  };
  if (!has("video") && !has("image"))
    throw UsageError(fmt::format("{}: no column 'video' or 'image' (the media paths)", path.string()));
  const int64_t prompt = table.column("prompt");
  const int64_t video = has("video") ? table.column("video") : -1, image = has("image") ? table.column("image") : -1;
  // DiffSynth-Studio's VACE columns; its Fun-Control column control_video where there is no vace_video.
  const int64_t control = has("vace_video")      ? table.column("vace_video")
                          : has("control_video") ? table.column("control_video")
                                                 : -1,
                mask = has("vace_video_mask") ? table.column("vace_video_mask") : -1,
                reference = has("vace_reference_image") ? table.column("vace_reference_image") : -1;
  std::vector<MediaItem> items;
  for (int64_t r = 0; r < table.rows(); ++r) {
    MediaItem item;
    item.origin = fmt::format("{} line {}", path.string(), table.lines[size_t(r)]);
    std::string listed = video >= 0 ? table.cell(r, video) : "";
    if (listed.empty() && image >= 0) listed = table.cell(r, image);
    if (listed.empty())
      item.problem = "names no video or image";
    else
      item.media = resolve(path.parent_path(), listed);
    if (!table.cell(r, prompt).empty()) item.caption = table.cell(r, prompt);
    if (control >= 0 && !table.cell(r, control).empty())
      item.control = resolve(path.parent_path(), table.cell(r, control));
    if (mask >= 0 && !table.cell(r, mask).empty()) item.mask = resolve(path.parent_path(), table.cell(r, mask));
    if (reference >= 0 && !table.cell(r, reference).empty())
      item.references.push_back(resolve(path.parent_path(), table.cell(r, reference)));
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<MediaItem> list_jsonl(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("{}: cannot be opened", path.string()));
  std::vector<MediaItem> items;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    MediaItem item;
    item.origin = fmt::format("{} line {}", path.string(), number);
    const auto doc = parse_json_or_discarded(line);  // nesting bounded: the file is a user's
    if (!doc.is_object()) {
      item.problem = "not a JSON object";
    } else {
      for (const char* key : {"video_path", "image_path"})
        if (item.media.empty() && doc.contains(key) && doc[key].is_string() && !doc[key].get<std::string>().empty())
          item.media = resolve(path.parent_path(), doc[key].get<std::string>());
      if (item.media.empty()) item.problem = "no \"video_path\" or \"image_path\" string";
      if (doc.contains("caption") && doc["caption"].is_string()) item.caption = doc["caption"].get<std::string>();
      for (const auto& [key, slot] :
           {std::pair{"vace_video", &item.control}, {"control_video", &item.control}, {"vace_video_mask", &item.mask}})
        if (slot->empty() && doc.contains(key) && doc[key].is_string() && !doc[key].get<std::string>().empty())
          *slot = resolve(path.parent_path(), doc[key].get<std::string>());
      if (doc.contains("vace_reference_image")) {
        const auto& refs = doc["vace_reference_image"];
        for (const auto& ref : refs.is_array() ? refs : nlohmann::json::array({refs}))
          if (ref.is_string() && !ref.get<std::string>().empty())
            item.references.push_back(resolve(path.parent_path(), ref.get<std::string>()));
      }
    }
    items.push_back(std::move(item));
  }
  if (items.empty()) throw UsageError(fmt::format("{}: holds no entries", path.string()));
  return items;
}

}  // namespace

bool is_media_name(const std::string& name) {
  static const std::set<std::string> kExtensions = {".mp4",  ".mkv",  ".webm", ".mov", ".avi", ".gif", ".m4v",
                                                    ".mpg",  ".mpeg", ".ts",   ".wmv", ".flv", ".png", ".jpg",
                                                    ".jpeg", ".webp", ".bmp",  ".tif", ".tiff"};
  return kExtensions.count(lower(fs::path(name).extension().string())) > 0;
}

std::vector<MediaItem> list_media(const std::string& listing, const MediaListOptions& options) {
  const fs::path path(listing);
  std::error_code ec;
  if (fs::is_directory(path, ec)) return list_folder(path, options);
  if (!fs::exists(path, ec)) throw UsageError(fmt::format("{}: no such file or folder", listing));
  const std::string ext = lower(path.extension().string());
  if (ext == ".csv") return list_csv(path);
  if (ext == ".jsonl") return list_jsonl(path);
  throw UsageError(fmt::format("{}: not a folder, .csv or .jsonl listing of media and captions", listing));
}

}  // namespace wt::data
