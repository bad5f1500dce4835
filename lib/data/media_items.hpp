// What a user hands `wandata encode`: media files and their captions, from
// one of three listings, each read as the tools users come from write it:
//   a folder      every video and image in it (not its subfolders), sorted
//                 by name, each with its sidecar caption NAME + extension
//                 (NAME.txt by default) when there is one;
//   a .csv        a header and columns `video` or `image` (a path) and
//                 `prompt`, as DiffSynth-Studio's metadata.csv;
//   a .jsonl      one JSON object a line with `video_path` or `image_path`
//                 and `caption`, as musubi-tuner's.
// Relative paths are relative to the listing's folder. A listing that cannot
// be read at all is a UsageError; an entry that names no media is kept as an
// item with its problem, so the job reports it and goes on.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace wt::data {

struct MediaItem {
  std::string media;                   // path of the video or image ("" when the entry names none)
  std::optional<std::string> caption;  // absent: no caption found
  std::string origin;                  // where it was listed: "list.csv line 4", "clips/a.mp4"
  std::string problem;                 // non-empty: the entry is unusable, and why
  // A VACE model's control (wandata encode --condition vace): a control
  // video, its mask video and reference pictures; a Fun-Control model's
  // (--condition fun-control): the control video; "" / empty: none given.
  std::string control, mask;
  std::vector<std::string> references;
};

struct MediaListOptions {
  std::string caption_extension = ".txt";  // sidecar captions in a folder
  // A folder's NAME.control.EXT, NAME.mask.EXT and NAME.ref*.EXT beside
  // NAME.EXT are NAME's control files, not items (wandata encode
  // --condition vace or fun-control); false: every media file is an item.
  bool control_files = false;
};

// The items of a folder, .csv or .jsonl, in listing order.
std::vector<MediaItem> list_media(const std::string& listing, const MediaListOptions& options = {});

// Whether a file name has an extension wantrain takes as a video or an image
// in a folder (case-insensitive): mp4 mkv webm mov avi gif m4v mpg mpeg ts
// wmv flv / png jpg jpeg webp bmp tif tiff.
bool is_media_name(const std::string& name);

}  // namespace wt::data
