// The prompt file of samples drawn during training (wantrain
// --sample-prompts): one prompt a line, each optionally followed by its own
// settings, as musubi-tuner's prompt files write them:
//
//   # a comment; blank lines are skipped
//   a dog walks along a beach at sunset --size 832x480 --frames 33 --seed 42
//   a cat yawns --image cat.png --negative-prompt blurry, static --steps 30 --cfg 4
//   a red ball rolls --w 256 --h 256 --f 17 --d 7      (musubi-tuner's short names)
//
// Each setting runs up to the next " --"; its value may hold spaces (a
// negative prompt). Unset settings take the run's (sample/prompt_videos.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wt::wan {

struct SamplePrompt {
  int line = 0;  // in the file, from 1: what errors and outputs name
  std::string prompt;
  std::optional<std::string> negative_prompt;  // --negative-prompt / --n ('' is the all-zero context)
  int64_t width = 0, height = 0;               // --size WxH / --w, --h (pixels; 0: the run's)
  int64_t frames = 0;                          // --frames / --f (pixel frames, 4k + 1; 0: the run's)
  std::optional<uint64_t> seed;                // --seed / --d
  std::string image;                           // --image / --i: the first frame (image-to-video models)
  int steps = 0;                               // --steps / --s (0: the run's)
  std::optional<double> cfg;                   // --cfg / --g
};

// Parses `path`. Every bad line is found before anything is returned: a
// UsageError of one line per bad line, each "FILE:LINE: what is wrong"
// (an unknown setting, a value that is no number, a size not WxH, an empty
// prompt); also for an unreadable file and for a file with no prompt.
std::vector<SamplePrompt> read_sample_prompts(const std::string& path);

// The same of the file's text; `name` stands for the file in errors.
std::vector<SamplePrompt> parse_sample_prompts(const std::string& text, const std::string& name);

}  // namespace wt::wan
