// wandata split / merge: write the samples of one or more datasets, in
// order, into M new shards of near-equal size (prompts kept). Buckets stay
// apart: every new shard holds one latent shape, and each bucket gets a
// share of the M shards in proportion to its samples (at least one).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <array>
#include <iostream>
#include <map>
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
    const auto& first = inputs.front().buckets().front().shape;
    const auto& shape = inputs.back().buckets().front().shape;
    if (!data::same_dataset(shape, first))
      throw UsageError(fmt::format("data: {} has latents {}, text_emb {} but {} has latents {}, text_emb {}", source,
                                   shape.latents_string(), shape.text_string(), sources.front(), first.latents_string(),
                                   first.text_string()));
  }
  // Every sample (dataset, index) by bucket, buckets ordered by shape as a
  // Dataset orders them; within a bucket, the sources' order.
  struct Bucket {
    data::SampleShape shape;
    std::vector<std::pair<size_t, int64_t>> samples;
  };
  std::map<std::array<int64_t, 3>, Bucket> by_shape;
  int64_t total = 0;
  for (size_t d = 0; d < inputs.size(); ++d)
    for (int64_t i = 0; i < inputs[d].size(); ++i, ++total) {
      const auto& shape = inputs[d].shape_of(i);
      auto& bucket = by_shape[{shape.frames, shape.height, shape.width}];
      bucket.shape = shape;
      bucket.samples.emplace_back(d, i);
    }
  std::vector<Bucket> buckets;
  for (auto& entry : by_shape) buckets.push_back(std::move(entry.second));
  const auto bucket_count = int64_t(buckets.size());
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
    quota.push_back(double(shards) * double(bucket.samples.size()) / double(total));
    counts.push_back(std::max<int64_t>(1, int64_t(quota.back())));
  }
  auto sum = [&] { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); };
  while (sum() != shards) {
    const bool more = sum() < shards;
    size_t pick = counts.size();
    for (size_t b = 0; b < counts.size(); ++b) {
      if (more ? counts[b] >= int64_t(buckets[b].samples.size()) : counts[b] <= 1) continue;
      const double gap = more ? quota[b] - double(counts[b]) : double(counts[b]) - quota[b];
      const double best = pick == counts.size() ? -1e300
                          : more                ? quota[pick] - double(counts[pick])
                                                : double(counts[pick]) - quota[pick];
      if (gap > best) pick = b;
    }
    counts[pick] += more ? 1 : -1;
  }

  bool prompts = true;
  for (const auto& d : inputs)
    for (const auto& shard : d.shards()) prompts = prompts && shard.has_prompt;
  std::vector<std::unique_ptr<data::SampleReader>> readers;
  for (const auto& d : inputs) readers.push_back(std::make_unique<data::SampleReader>(d));

  Progress progress(command, total);
  int64_t k = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& s = buckets[b].shape;
    const auto& samples = buckets[b].samples;
    at::Tensor latents = at::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
    at::Tensor text = at::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
    const auto n = int64_t(samples.size());
    int64_t written = 0;
    for (int64_t j = 0; j < counts[b]; ++j, ++k) {
      const int64_t end = data::shard_first_sample(j + 1, n, counts[b]);
      data::ShardWriter writer(data::shard_path(out, k), s, end - written, prompts);
      for (int64_t row = 0; written < end; ++written, ++row) {
        const auto [d, index] = samples[size_t(written)];
        int32_t text_len = 0;
        readers[d]->read(index, latents, text, text_len);
        writer.write(row, latents, text, text_len, prompts ? readers[d]->prompt(index) : std::string());
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
