// wandata split / merge: write the samples of one or more datasets, in
// order, into M new shards of near-equal size (prompts kept).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <iostream>

#include "commands.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/world.hpp"
#include "output_directory.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/progress.hpp"
#include "wantrain/app/version.hpp"

namespace wt {

namespace {

int reshard(const char* command, int argc, char** argv, int64_t default_shards, bool many_sources) {
  std::string config, out;
  std::vector<std::string> sources;
  int64_t shards = default_shards;
  OptionSet options(std::string("wandata ") + command, many_sources ? "DIR... --out DIR" : "DIR --out DIR");
  options.group(command)
      .standard_options(&config)
      .positional("data", &sources, many_sources ? "the datasets to join" : "the dataset to split",
                  many_sources ? -1 : 1)
      .add("out", &out, "output directory (created; must not hold shards yet)")
      .add("shards", &shards, "number of output shards");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (sources.empty())
    throw UsageError(fmt::format("wandata {}: give the dataset director{}", command, many_sources ? "ies" : "y"));
  if (out.empty()) throw UsageError("option --out: the output directory is required");

  std::vector<data::Dataset> inputs;
  for (const auto& source : sources) {
    inputs.push_back(data::Dataset::open(source));
    if (inputs.back().shape() != inputs.front().shape())
      throw UsageError(fmt::format("data: {} has latents {} but {} has latents {}", source,
                                   inputs.back().shape().latents_string(), sources.front(),
                                   inputs.front().shape().latents_string()));
  }
  int64_t total = 0;
  for (const auto& d : inputs) total += d.size();
  if (shards < 1 || shards > total)
    throw UsageError(fmt::format("option --shards: must be between 1 and the {} samples", total));
  prepare_output_directory(out);

  const data::SampleShape& s = inputs.front().shape();
  at::Tensor latents = at::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
  at::Tensor text = at::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
  bool prompts = true;
  for (const auto& d : inputs)
    for (const auto& shard : d.shards()) prompts = prompts && shard.has_prompt;

  Progress progress(command, total);
  size_t source = 0;
  int64_t in_source = 0;
  auto reader = std::make_unique<data::SampleReader>(inputs[0]);
  int64_t written = 0;
  for (int64_t k = 0; k < shards; ++k) {
    const int64_t end = data::shard_first_sample(k + 1, total, shards);
    data::ShardWriter writer(data::shard_path(out, k), s, end - written, prompts);
    for (int64_t row = 0; written < end; ++written, ++row, ++in_source) {
      if (in_source == inputs[source].size()) {
        reader = std::make_unique<data::SampleReader>(inputs[++source]);
        in_source = 0;
      }
      int32_t text_len = 0;
      reader->read(in_source, latents, text, text_len);
      writer.write(row, latents, text, text_len, prompts ? reader->prompt(in_source) : std::string());
      progress.advance();
    }
  }
  std::cout << fmt::format("wandata {}: wrote {} samples in {} shards to {}\n", command, total, shards, out);
  return kExitOk;
}

}  // namespace

int run_split(distributed::World&, int argc, char** argv) { return reshard("split", argc, argv, 2, false); }
int run_merge(distributed::World&, int argc, char** argv) { return reshard("merge", argc, argv, 1, true); }

}  // namespace wt
