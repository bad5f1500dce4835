#include "wantrain/data/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "wantrain/util/error.hpp"

namespace wt::data {

uint64_t PortableRandom::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t PortableRandom::below(uint64_t bound) {
  // Reject the low values that would make `% bound` favour small results.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = next();
    if (r >= threshold) return r % bound;
  }
}

std::vector<int64_t> portable_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  PortableRandom random(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[random.below(static_cast<uint64_t>(i) + 1)]);
  return p;
}

namespace {
// Distinct, well-mixed seeds for each (seed, epoch[, rank]).
uint64_t mix(uint64_t seed, uint64_t epoch, uint64_t rank) {
  PortableRandom r(seed ^ (epoch * 0xD1B54A32D192ED03ull) ^ (rank * 0x8CB92BA72F3D8DD7ull));
  return r.next();
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

DistributedSampler::DistributedSampler(std::vector<int64_t> shard_sizes, SamplerOptions options)
    : options_(options), shard_sizes_(std::move(shard_sizes)) {
  const int64_t W = options_.world_size, B = options_.batch_size;
  if (W < 1 || options_.rank < 0 || options_.rank >= W || B < 1)
    throw Error(
        fmt::format("DistributedSampler: rank {} of {} with batch {} is not a valid layout", options_.rank, W, B));
  const int64_t total = std::accumulate(shard_sizes_.begin(), shard_sizes_.end(), int64_t{0});
  if (!options_.shard_affinity) {
    batches_per_epoch_ = options_.drop_last ? total / (W * B) : ceil_div(total, W * B);
    if (batches_per_epoch_ == 0)
      throw UsageError(
          fmt::format("data: {} samples are fewer than one global batch ({} ranks x {} samples per rank "
                      "per step = {}); use more data, fewer ranks or a smaller batch",
                      total, W, B, W * B));
    return;
  }
  if (static_cast<int64_t>(shard_sizes_.size()) < W)
    throw SettingError("shard_affinity", fmt::format("{} shards for {} ranks; every rank needs at least one shard "
                                                     "(re-shard with wandata split)",
                                                     shard_sizes_.size(), W));
  int64_t fewest = INT64_MAX, most = 0, offset = 0;
  std::vector<int64_t> per_rank(W, 0);
  for (size_t s = 0; s < shard_sizes_.size(); ++s) {
    const int owner = static_cast<int>(s % W);
    per_rank[owner] += shard_sizes_[s];
    if (owner == options_.rank)
      for (int64_t i = 0; i < shard_sizes_[s]; ++i) own_.push_back(offset + i);
    offset += shard_sizes_[s];
  }
  for (auto n : per_rank) {
    fewest = std::min(fewest, n);
    most = std::max(most, n);
  }
  batches_per_epoch_ = options_.drop_last ? fewest / B : ceil_div(most, B);
  if (batches_per_epoch_ == 0)
    throw SettingError(
        "shard_affinity",
        fmt::format("a rank's shards hold only {} samples, fewer than its {} samples per step", fewest, B));
}

const std::vector<int64_t>& DistributedSampler::order(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    if (options_.shard_affinity) {
      const auto p = portable_permutation(static_cast<int64_t>(own_.size()),
                                          mix(options_.seed, static_cast<uint64_t>(epoch), options_.rank));
      cached_order_.resize(p.size());
      for (size_t i = 0; i < p.size(); ++i) cached_order_[i] = own_[p[i]];
    } else {
      const int64_t total = std::accumulate(shard_sizes_.begin(), shard_sizes_.end(), int64_t{0});
      cached_order_ = portable_permutation(total, mix(options_.seed, static_cast<uint64_t>(epoch), 0));
    }
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

std::vector<int64_t> DistributedSampler::batch(int64_t epoch, int64_t k) const {
  if (k < 0 || k >= batches_per_epoch_)
    throw Error(fmt::format("DistributedSampler: batch {} of an epoch of {}", k, batches_per_epoch_));
  const auto& o = order(epoch);
  const int64_t n = static_cast<int64_t>(o.size()), B = options_.batch_size, W = options_.world_size;
  std::vector<int64_t> out(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) {
    // Positions past the end wrap around (only without drop_last).
    const int64_t position = options_.shard_affinity ? k * B + j : options_.rank + (k * B + j) * W;
    out[static_cast<size_t>(j)] = o[static_cast<size_t>(position % n)];
  }
  return out;
}

std::vector<int64_t> DistributedSampler::next() {
  auto out = batch(state_.epoch, state_.consumed / global_batch());
  state_.consumed += global_batch();
  if (state_.consumed / global_batch() == batches_per_epoch_) state_ = {state_.epoch + 1, 0};
  return out;
}

void DistributedSampler::restore(const SamplerState& state) {
  if (state.epoch < 0 || state.consumed < 0 || state.consumed % global_batch() != 0 ||
      state.consumed / global_batch() >= batches_per_epoch_)
    throw UsageError(
        fmt::format("data: cannot resume at epoch {} after {} samples with a global batch of {} "
                    "({} batches per epoch)",
                    state.epoch, state.consumed, global_batch(), batches_per_epoch_));
  state_ = state;
}

}  // namespace wt::data
