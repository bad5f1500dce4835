// wandata split / merge: write the samples of one or more datasets, in
// order, into M new shards of near-equal size (prompts kept). Buckets stay
// apart: every new shard holds one latent shape, and each bucket gets a
// share of the M shards in proportion to its samples (at least one).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <iostream>
#include <numeric>

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
  int64_t shards = 0;  // 0: the default, and at least one per bucket
  const std::string shards_help = fmt::format(
      "number of output shards (default {}, or one per bucket when there are more buckets)", default_shards);
  OptionSet options(std::string("wandata ") + command, many_sources ? "DIR... --out DIR" : "DIR --out DIR");
  options.group(command)
      .standard_options(&config)
      .positional("data", &sources, many_sources ? "the datasets to join" : "the dataset to split",
                  many_sources ? -1 : 1)
      .add("out", &out, "output directory (created; must not hold shards yet)")
      .add("shards", &shards, shards_help.c_str());
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
    const auto& first = inputs.front().buckets().front().shape;
    const auto& shape = inputs.back().buckets().front().shape;
    if (!data::same_dataset(shape, first))
      throw UsageError(
          fmt::format("data: {} has latents {}, text_emb {}, y {}, clip_fea {}, vace_context {} but {} has latents {}, "
                      "text_emb {}, y {}, clip_fea {}, vace_context {}",
                      source, shape.latents_string(), shape.text_string(), shape.condition_string(),
                      shape.clip_string(), shape.vace_string(), sources.front(), first.latents_string(),
                      first.text_string(), first.condition_string(), first.clip_string(), first.vace_string()));
  }
  // All inputs' shards as one dataset, in the sources' order: its buckets
  // are what the new shards keep apart, each bucket's samples in that order.
  std::vector<data::ShardInfo> infos;
  for (const auto& input : inputs) infos.insert(infos.end(), input.shards().begin(), input.shards().end());
  const data::Dataset all = data::Dataset::of(out, std::move(infos));
  const int64_t total = all.size();
  const auto& buckets = all.buckets();
  const auto bucket_count = int64_t(buckets.size());
  if (shards == 0) shards = std::min(std::max(default_shards, bucket_count), total);
  if (shards < bucket_count || shards > total)
    throw UsageError(
        fmt::format("option --shards: must be between {} and the {} samples", bucket_count, total) +
        (bucket_count > 1 ? fmt::format(" (every one of the {} buckets needs a shard)", bucket_count) : ""));
  prepare_output_directory(out);

  // Each bucket's shards: its share of M by its samples, at least one
  // (largest remainders, ties to the earlier bucket).
  std::vector<int64_t> counts;
  std::vector<double> quota;
  for (const auto& bucket : buckets) {
    quota.push_back(double(shards) * double(bucket.samples) / double(total));
    counts.push_back(std::max<int64_t>(1, int64_t(quota.back())));
  }
  auto sum = [&] { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); };
  while (sum() != shards) {
    const bool more = sum() < shards;
    size_t pick = counts.size();
    for (size_t b = 0; b < counts.size(); ++b) {
      if (more ? counts[b] >= buckets[b].samples : counts[b] <= 1) continue;
      const double gap = more ? quota[b] - double(counts[b]) : double(counts[b]) - quota[b];
      const double best = pick == counts.size() ? -1e300
                          : more                ? quota[pick] - double(counts[pick])
                                                : double(counts[pick]) - quota[pick];
      if (gap > best) pick = b;
    }
    counts[pick] += more ? 1 : -1;
  }

  bool prompts = true;
  for (const auto& shard : all.shards()) prompts = prompts && shard.has_prompt;

  Progress progress(command, total);
  int64_t k = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& s = buckets[b].shape;
    const std::vector<int64_t> samples = all.bucket_indices(b);  // global indices of `all`
    // A reader per bucket: it keeps open only this bucket's shards.
    data::SampleReader reader(all);
    at::Tensor latents = at::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
    at::Tensor text = at::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
    data::SampleCondition condition;  // the image-to-video condition, copied where the dataset has one
    if (s.has_condition())
      condition.y = at::empty({s.condition_channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
    if (s.clip_tokens > 0) condition.clip_fea = at::empty({s.clip_tokens, s.clip_dim}, data::scalar_type(s.text));
    if (s.has_vace())
      condition.vace_context =
          at::empty({s.vace_channels, s.vace_references + s.frames, s.height, s.width}, data::scalar_type(s.latents));
    const auto n = int64_t(samples.size());
    int64_t written = 0;
    for (int64_t j = 0; j < counts[b]; ++j, ++k) {
      const int64_t end = data::shard_first_sample(j + 1, n, counts[b]);
      data::ShardWriter writer(data::shard_path(out, k), s, end - written, prompts);
      for (int64_t row = 0; written < end; ++written, ++row) {
        const int64_t index = samples[size_t(written)];
        int32_t text_len = 0;
        reader.read(index, latents, text, text_len, &condition);
        writer.write(row, latents, text, text_len, prompts ? reader.prompt(index) : std::string(), condition);
        progress.advance();
      }
    }
  }
  std::cout << fmt::format("wandata {}: wrote {} samples in {} shards to {}{}\n", command, total, shards, out,
                           bucket_count > 1 ? fmt::format(" ({} buckets kept apart)", bucket_count) : "");
  return kExitOk;
}

}  // namespace

int run_split(distributed::World&, int argc, char** argv) { return reshard("split", argc, argv, 2, false); }
int run_merge(distributed::World&, int argc, char** argv) { return reshard("merge", argc, argv, 1, true); }

}  // namespace wt
