#include "wantrain/data/media_items.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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

std::vector<MediaItem> list_folder(const fs::path& dir, const MediaListOptions& options) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && is_media_name(it->path().filename().string())) files.push_back(it->path());
  if (ec) throw UsageError(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
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
