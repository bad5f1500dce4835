#include "wantrain/wan/sample/sample_prompts.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/text.hpp"

namespace wt::wan {
namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// A whole non-negative integer, or nothing.
std::optional<uint64_t> whole_number(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  const uint64_t value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return value;
}

// musubi-tuner's one-letter names, to ours.
const std::map<std::string, std::string>& short_names() {
  static const std::map<std::string, std::string> names{{"w", "width"}, {"h", "height"}, {"f", "frames"},
                                                        {"d", "seed"},  {"i", "image"},  {"n", "negative-prompt"},
                                                        {"s", "steps"}, {"g", "cfg"}};
  return names;
}

const std::vector<std::string> kNames{"--size",  "--frames", "--seed", "--image", "--negative-prompt",
                                      "--steps", "--cfg"};

// One setting into `p`; what is wrong with it, or empty.
std::string apply(SamplePrompt& p, const std::string& written, const std::string& value) {
  const auto alias = short_names().find(written);
  const std::string name = alias == short_names().end() ? written : alias->second;
  auto positive = [&](int64_t& into, const char* what) -> std::string {
    const auto n = whole_number(value);
    if (!n || *n == 0 || *n > 100000)
      return fmt::format("--{} '{}': {} must be a positive whole number", written, value, what);
    into = int64_t(*n);
    return {};
  };
  if (name == "size") {
    const auto x = value.find('x');
    const auto w = whole_number(value.substr(0, x)),
               h = x == std::string::npos ? std::nullopt : whole_number(value.substr(x + 1));
    if (!w || !h || *w == 0 || *h == 0 || *w > 100000 || *h > 100000)
      return fmt::format("--size '{}': must be WIDTHxHEIGHT in pixels, e.g. 832x480", value);
    p.width = int64_t(*w);
    p.height = int64_t(*h);
    return {};
  }
  if (name == "width") return positive(p.width, "a width");
  if (name == "height") return positive(p.height, "a height");
  if (name == "frames") return positive(p.frames, "a frame count");
  if (name == "steps") {
    int64_t steps = 0;
    if (auto why = positive(steps, "a step count"); !why.empty()) return why;
    p.steps = int(steps);
    return {};
  }
  if (name == "seed") {
    const auto n = whole_number(value);
    if (!n) return fmt::format("--{} '{}': a seed must be a whole number of 0 or more", written, value);
    p.seed = *n;
    return {};
  }
  if (name == "cfg") {
    char* end = nullptr;
    const double g = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(g) || g < 0)
      return fmt::format("--{} '{}': a guidance scale must be a number of 0 or more", written, value);
    p.cfg = g;
    return {};
  }
  if (name == "image") {
    if (value.empty()) return fmt::format("--{}: give the picture's path", written);
    p.image = value;
    return {};
  }
  if (name == "negative-prompt") {
    p.negative_prompt = value;
    return {};
  }
  return fmt::format(
      "--{}: no such setting{} (settings: --size, --frames, --seed, --image, --negative-prompt, "
      "--steps, --cfg; or musubi-tuner's --w --h --f --d --i --n --s --g)",
      written, did_you_mean("--" + written, kNames));
}

}  // namespace

std::vector<SamplePrompt> parse_sample_prompts(const std::string& text, const std::string& name) {
  std::vector<SamplePrompt> prompts;
  std::vector<std::string> problems;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string whole = trim(line);
    if (whole.empty() || whole[0] == '#') continue;
    // "prompt --a x --b y z": the prompt, then each setting up to the next " --".
    SamplePrompt p;
    p.line = number;
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t at = whole.find("--"); at != std::string::npos; at = whole.find("--", at + 2))
      if (at == 0 || whole[at - 1] == ' ' || whole[at - 1] == '\t') {
        parts.push_back(whole.substr(start, at - start));
        start = at + 2;
      }
    parts.push_back(whole.substr(start));
    p.prompt = trim(parts[0]);
    std::vector<std::string> wrong;
    if (p.prompt.empty()) wrong.push_back("the line has settings but no prompt before them");
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string part = trim(parts[i]);
      const auto space = part.find_first_of(" \t");
      const std::string setting = part.substr(0, space);
      const std::string value = space == std::string::npos ? std::string() : trim(part.substr(space));
      if (auto why = apply(p, setting, value); !why.empty()) wrong.push_back(why);
    }
    if ((p.width > 0) != (p.height > 0) && wrong.empty())
      wrong.push_back(
          fmt::format("--{} without --{}: give both, or --size WxH", p.width > 0 ? "w" : "h", p.width > 0 ? "h" : "w"));
    for (const auto& why : wrong) problems.push_back(fmt::format("{}:{}: {}", name, number, why));
    if (wrong.empty()) prompts.push_back(std::move(p));
  }
  if (!problems.empty()) {
    std::string message;
    for (const auto& problem : problems) message += (message.empty() ? "" : "\n") + problem;
    throw UsageError(message);
  }
  if (prompts.empty()) throw UsageError(fmt::format("{}: holds no prompt (one a line; # starts a comment)", name));
  return prompts;
}

std::vector<SamplePrompt> read_sample_prompts(const std::string& path) {
  if (const auto why = unreadable_file_reason(path); !why.empty()) throw UsageError(fmt::format("{}: {}", path, why));
  return parse_sample_prompts(read_whole_file(path), path);
}

}  // namespace wt::wan
