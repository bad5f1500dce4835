// DistributedSampler: which samples each rank reads, batch by batch.
//
// Epoch e visits a permutation of all N samples, made by a portable
// generator from (seed, e): the same order on every platform, compiler and
// world size. Rank r of W takes permutation positions r, r+W, r+2W, ...;
// its batch k (of B samples) is positions r + (kB + j)·W, j < B, so global
// batch k (all ranks together) is positions [kBW, (k+1)BW) — the same samples
// as batch k of one rank with batch BW. Every rank gets the same number of
// batches, computed from shard sizes alone: floor(N / BW) (the tail is
// dropped), or with drop_last off ceil(N / BW) with the last batch padded by
// wrapping around to the start of the permutation.
//
// Buckets (a dataset of several latent shapes, dataset.hpp): every global
// batch comes from one bucket. Epoch e permutes each bucket b's samples from
// (seed, e, b) and cuts them into global batches as above (floor or ceil of
// n_b / BW, a padded tail wrapping around within the bucket); then the list
// of all buckets' batches is shuffled from (seed, e). Both depend on the
// seed and epoch alone, so the global batches are the same for any world
// size. A dataset of one bucket gets exactly the order described above.
//
// With shard affinity, rank r reads only whole shards (shards r, r+W, ...):
// it permutes its own samples per epoch from (seed, e, r), and all ranks take
// the batch count of the rank with the fewest (drop) or most (pad) samples.
// It needs a dataset of one bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt::data {

// What a sampler needs of a dataset (Dataset::layout()): each shard's sample count and bucket.
struct DataLayout {
  DataLayout() = default;
  explicit DataLayout(std::vector<int64_t> sizes) : shard_sizes(std::move(sizes)) {}  // one bucket
  std::vector<int64_t> shard_sizes;
  std::vector<int> shard_buckets;         // empty: every shard in bucket 0
  std::vector<std::string> bucket_names;  // for messages and plans; may be empty
};

struct SamplerOptions {
  int world_size = 1;
  int rank = 0;
  int64_t batch_size = 1;  // per rank per optimizer step (--batch-size x --grad-accum)
  uint64_t seed = 0;
  bool drop_last = true;
  bool shard_affinity = false;
};

// With shard affinity, the rank that reads shard `shard` (its position in
// the dataset's sorted list of shards): shards r, r + W, ... go to rank r.
inline int shard_affinity_rank(int64_t shard, int world_size) { return static_cast<int>(shard % world_size); }

// Where a sampler is: the epoch, and the samples of that epoch already
// consumed by all ranks together (a multiple of the global batch), so that
// a run can resume at another world size.
struct SamplerState {
  int64_t epoch = 0;
  int64_t consumed = 0;
  bool operator==(const SamplerState& o) const { return epoch == o.epoch && consumed == o.consumed; }
};

// SplitMix64: a small generator whose output is fixed by its definition
// (unlike std:: distributions), so data order is portable.
class PortableRandom {
 public:
  explicit PortableRandom(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t bound);  // uniform in [0, bound), unbiased
 private:
  uint64_t state_;
};

// A permutation of [0, n) from `seed`, by Fisher-Yates with PortableRandom.
std::vector<int64_t> portable_permutation(int64_t n, uint64_t seed);

class DistributedSampler {
 public:
  // Throws UsageError when the data cannot give every rank one batch (fewer
  // samples than world_size x batch_size with drop_last, or, with shard
  // affinity, fewer shards than ranks or several buckets).
  DistributedSampler(const DataLayout& layout, SamplerOptions options);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Per bucket: its samples and the global batches an epoch takes from it.
  const std::vector<int64_t>& bucket_samples() const { return bucket_samples_; }
  const std::vector<int64_t>& bucket_batches() const { return bucket_batches_; }
  int64_t global_batch() const { return options_.batch_size * options_.world_size; }
  const SamplerOptions& options() const { return options_; }

  // This rank's global sample indices of batch `batch` of epoch `epoch`.
  std::vector<int64_t> batch(int64_t epoch, int64_t batch) const;

  // The next batch in order, advancing the state (epochs roll over).
  std::vector<int64_t> next();
  SamplerState state() const { return state_; }
  // Continues from `state`; its `consumed` must be a multiple of global_batch().
  void restore(const SamplerState& state);

 private:
  // This epoch's visiting order of each bucket (shard affinity: this
  // rank's samples, as bucket 0), and which (bucket, batch of the bucket)
  // each global batch is. Cached for the current epoch.
  struct Epoch {
    std::vector<std::vector<int64_t>> order;
    std::vector<std::pair<int, int64_t>> batches;
  };
  const Epoch& epoch_plan(int64_t epoch) const;

  SamplerOptions options_;
  std::vector<std::vector<int64_t>> members_;  // each bucket's global indices, ascending
  std::vector<int64_t> own_;                   // shard affinity: the global indices of this rank's shards
  std::vector<int64_t> bucket_samples_, bucket_batches_;
  int64_t batches_per_epoch_ = 0;
  SamplerState state_;
  mutable int64_t cached_epoch_ = -1;
  mutable Epoch cached_;
};

}  // namespace wt::data
