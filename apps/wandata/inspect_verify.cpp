// wandata inspect DIR: what a dataset holds. wandata verify DIR: read it all
// and report every problem.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <utility>

#include "commands.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/progress.hpp"
#include "wantrain/app/version.hpp"

namespace fs = std::filesystem;

namespace wt {

namespace {

// Parses `wandata CMD DIR`; returns "" after printing --help.
std::string directory_operand(const char* command, int argc, char** argv) {
  std::string config;
  std::vector<std::string> dirs;
  OptionSet options(std::string("wandata ") + command, "DIR");
  options.group(command).standard_options(&config).positional("data", &dirs, "the dataset directory", 1);
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return {};
  }
  if (dirs.empty()) throw UsageError(fmt::format("wandata {}: give the dataset directory", command));
  return dirs.front();
}

// /y's shape: one bucket's, or its channels and dtype where F, H, W vary with the bucket.
std::string condition_shape(const data::SampleShape& s, bool bucketed) {
  return bucketed ? fmt::format("[N,{},F,H,W] {}", s.condition_channels, data::to_string(s.latents))
                  : s.condition_string();
}

// /vace_context's shape: one bucket's, or its channels, reference frames and dtype.
std::string vace_shape(const data::SampleShape& s, bool bucketed) {
  return bucketed ? fmt::format("[N,{},{}+F,H,W] {}", s.vace_channels, s.vace_references, data::to_string(s.latents))
                  : s.vace_string();
}

}  // namespace

int run_inspect(distributed::World&, int argc, char** argv) {
  const std::string directory = directory_operand("inspect", argc, argv);
  if (directory.empty()) return kExitOk;
  const data::Dataset dataset = data::Dataset::open(directory);
  const auto& buckets = dataset.buckets();
  const auto& s = buckets.front().shape;  // all but F, H, W are every shard's
  std::cout << fmt::format("dataset {}: {} shards, {} samples\n  latents  {}\n  text_emb {}\n", directory,
                           dataset.shards().size(), dataset.size(),
                           buckets.size() == 1 ? s.latents_string()
                                               : fmt::format("[N,{},F,H,W] {}, in {} buckets", s.channels,
                                                             data::to_string(s.latents), buckets.size()),
                           s.text_string());
  if (s.has_condition())  // image-to-video: y follows each bucket's latents
    std::cout << fmt::format("  y        {}\n  clip_fea {}\n", condition_shape(s, buckets.size() > 1), s.clip_string());
  if (s.has_vace())  // VACE: the context follows each bucket's latents, after its reference frames
    std::cout << fmt::format("  vace_context {}\n", vace_shape(s, buckets.size() > 1));
  if (buckets.size() > 1) {
    std::cout << fmt::format("  {:<14} {:>24} {:>7} {:>9}\n", "bucket (FxHxW)", "latents", "shards", "samples");
    for (const auto& b : buckets)
      std::cout << fmt::format("  {:<14} {:>24} {:>7} {:>9}\n", b.name(), b.shape.latents_string(), b.shards.size(),
                               b.samples);
  }
  std::cout << fmt::format("  {:<32} {:>9} {:>7} {:>14}{}\n", "shard", "samples", "prompt", "bytes",
                           buckets.size() > 1 ? "  bucket" : "");
  std::uintmax_t total = 0;
  for (const auto& shard : dataset.shards()) {
    const auto bytes = fs::file_size(shard.path);
    total += bytes;
    std::cout << fmt::format("  {:<32} {:>9} {:>7} {:>14}{}\n", fs::path(shard.path).filename().string(), shard.samples,
                             shard.has_prompt ? "yes" : "no", bytes,
                             buckets.size() > 1 ? "  " + shard.shape.bucket_name() : "");
  }
  std::cout << fmt::format("  {:<32} {:>9} {:>7} {:>14}\n", "total", dataset.size(), "", total);
  for (const auto& b : buckets)
    std::cout << fmt::format(
        "  per sample{}: latents {} B, text_emb {} B{} (as stored)\n", buckets.size() > 1 ? " of " + b.name() : "",
        b.shape.latents_bytes(), b.shape.text_bytes(),
        b.shape.has_condition() ? fmt::format(", y and clip_fea {} B", b.shape.condition_bytes()) : "");
  return kExitOk;
}

int run_verify(distributed::World&, int argc, char** argv) {
  const std::string directory = directory_operand("verify", argc, argv);
  if (directory.empty()) return kExitOk;
  std::vector<std::string> problems;
  std::vector<data::ShardInfo> good;
  for (const auto& path : data::Dataset::shard_paths(directory)) {
    try {
      data::ShardInfo info = data::inspect_shard(path, &problems);
      if (!good.empty()) {
        if (std::string why = data::dataset_mismatch(path, info.shape, good.front().path, good.front().shape);
            !why.empty()) {
          problems.push_back(std::move(why));
          continue;
        }
      }
      good.push_back(std::move(info));
    } catch (const UsageError& e) {
      problems.push_back(e.what());
    }
  }
  int64_t total = 0;
  for (const auto& g : good) total += g.samples;
  Progress progress("verify", total);
  // Every sample of every structurally sound shard: fully readable and finite.
  for (const auto& info : good) {
    const data::Dataset one = data::Dataset::of(directory, {info});
    data::SampleReader reader(one);
    const auto& s = info.shape;
    at::Tensor latents = at::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
    at::Tensor text = at::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
    data::SampleCondition condition;  // the image-to-video condition or VACE context, where the shard has one
    if (s.has_condition())
      condition.y = at::empty({s.condition_channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
    if (s.clip_tokens > 0) condition.clip_fea = at::empty({s.clip_tokens, s.clip_dim}, data::scalar_type(s.text));
    if (s.has_vace())
      condition.vace_context =
          at::empty({s.vace_channels, s.vace_references + s.frames, s.height, s.width}, data::scalar_type(s.latents));
    for (int64_t i = 0; i < info.samples; ++i, progress.advance()) {
      int32_t text_len = 0;
      try {
        reader.read(i, latents, text, text_len, &condition);
      } catch (const Error& e) {
        problems.push_back(e.what());
        continue;
      }
      for (const auto& [name, tensor] : {std::pair{"/latents", &latents},
                                         {"/text_emb", &text},
                                         {"/y", &condition.y},
                                         {"/clip_fea", &condition.clip_fea},
                                         {"/vace_context", &condition.vace_context}})
        if (tensor->defined() && !at::isfinite(*tensor).all().item<bool>())
          problems.push_back(fmt::format("shard {} sample {}: {} holds NaN or Inf", info.path, i, name));
    }
  }
  for (const auto& p : problems) std::cout << "problem: " << p << "\n";
  if (!problems.empty()) {
    std::cout << fmt::format("wandata verify: {} problem{} in {}\n", problems.size(), problems.size() == 1 ? "" : "s",
                             directory);
    return kExitFailure;
  }
  std::vector<data::ShardInfo> shards = good;
  const auto buckets = data::Dataset::of(directory, std::move(shards)).buckets().size();
  const auto& shape = good.front().shape;
  std::cout << fmt::format("wandata verify: {} OK: {} shards, {} samples{}, every sample read and finite{}\n",
                           directory, good.size(), total, buckets > 1 ? fmt::format(" in {} buckets", buckets) : "",
                           shape.has_condition() ? fmt::format(" (image-to-video: y {}, clip_fea {})",
                                                               condition_shape(shape, buckets > 1), shape.clip_string())
                           : shape.has_vace() ? fmt::format(" (VACE: vace_context {})", vace_shape(shape, buckets > 1))
                                              : "");
  return kExitOk;
}

}  // namespace wt
