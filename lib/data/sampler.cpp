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
// Keys the order of the buckets' batches apart from every bucket's own order.
constexpr uint64_t kBatchOrderSalt = 0xB0C4E7D5A1F29368ull;
}  // namespace

DistributedSampler::DistributedSampler(const DataLayout& layout, SamplerOptions options) : options_(options) {
  const int64_t W = options_.world_size, B = options_.batch_size;
  if (W < 1 || options_.rank < 0 || options_.rank >= W || B < 1)
    throw Error(
        fmt::format("DistributedSampler: rank {} of {} with batch {} is not a valid layout", options_.rank, W, B));
  const auto& sizes = layout.shard_sizes;
  const auto& of_shard = layout.shard_buckets;
  if (!of_shard.empty() && of_shard.size() != sizes.size())
    throw Error("DistributedSampler: a bucket for every shard, or none");
  const int buckets = of_shard.empty() ? 1 : *std::max_element(of_shard.begin(), of_shard.end()) + 1;
  members_.resize(static_cast<size_t>(buckets));
  for (size_t s = 0, offset = 0; s < sizes.size(); offset += static_cast<size_t>(sizes[s]), ++s)
    for (int64_t i = 0; i < sizes[s]; ++i)
      members_[of_shard.empty() ? 0 : static_cast<size_t>(of_shard[s])].push_back(static_cast<int64_t>(offset) + i);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (!options_.shard_affinity) {
    for (const auto& m : members_) {
      const int64_t n = static_cast<int64_t>(m.size());
      bucket_samples_.push_back(n);
      bucket_batches_.push_back(options_.drop_last ? n / (W * B) : ceil_div(n, W * B));
      batches_per_epoch_ += bucket_batches_.back();
    }
    if (batches_per_epoch_ == 0) {
      const int64_t most = *std::max_element(bucket_samples_.begin(), bucket_samples_.end());
      throw UsageError(fmt::format(
          "data: {} are fewer than one global batch ({} ranks x {} samples per rank per "
          "step = {}); use more data, fewer ranks or a smaller batch",
          buckets == 1 ? fmt::format("{} samples", total) : fmt::format("the largest bucket's {} samples", most), W, B,
          W * B));
    }
    return;
  }
  if (buckets > 1)
    throw SettingError("shard_affinity",
                       fmt::format("the data hold {} latent shapes (buckets); with shard affinity a rank reads whole "
                                   "shards, which cannot make every global batch one shape: train without it",
                                   buckets));
  if (static_cast<int64_t>(sizes.size()) < W)
    throw SettingError("shard_affinity", fmt::format("{} shards for {} ranks; every rank needs at least one shard "
                                                     "(re-shard with wandata split)",
                                                     sizes.size(), W));
  int64_t fewest = INT64_MAX, most = 0, offset = 0;
  std::vector<int64_t> per_rank(W, 0);
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int owner = shard_affinity_rank(static_cast<int64_t>(s), W);
    per_rank[owner] += sizes[s];
    if (owner == options_.rank)
      for (int64_t i = 0; i < sizes[s]; ++i) own_.push_back(offset + i);
    offset += sizes[s];
  }
  for (auto n : per_rank) {
    fewest = std::min(fewest, n);
    most = std::max(most, n);
  }
  batches_per_epoch_ = options_.drop_last ? fewest / B : ceil_div(most, B);
  bucket_samples_ = {total};
  bucket_batches_ = {batches_per_epoch_};
  if (batches_per_epoch_ == 0)
    throw SettingError(
        "shard_affinity",
        fmt::format("a rank's shards hold only {} samples, fewer than its {} samples per step", fewest, B));
}

const DistributedSampler::Epoch& DistributedSampler::epoch_plan(int64_t epoch) const {
  if (cached_epoch_ == epoch) return cached_;
  const auto e = static_cast<uint64_t>(epoch);
  Epoch plan;
  if (options_.shard_affinity) {
    const auto p = portable_permutation(static_cast<int64_t>(own_.size()), mix(options_.seed, e, options_.rank));
    plan.order.emplace_back(p.size());
    for (size_t i = 0; i < p.size(); ++i) plan.order[0][i] = own_[static_cast<size_t>(p[i])];
  } else {
    for (size_t b = 0; b < members_.size(); ++b) {
      const auto& m = members_[b];
      const auto p = portable_permutation(static_cast<int64_t>(m.size()), mix(options_.seed, e, b));
      plan.order.emplace_back(p.size());
      for (size_t i = 0; i < p.size(); ++i) plan.order[b][i] = m[static_cast<size_t>(p[i])];
    }
  }
  for (size_t b = 0; b < bucket_batches_.size(); ++b)
    for (int64_t k = 0; k < bucket_batches_[b]; ++k) plan.batches.emplace_back(static_cast<int>(b), k);
  if (members_.size() > 1) {  // interleave the buckets' batches; one bucket keeps its order
    const auto p =
        portable_permutation(static_cast<int64_t>(plan.batches.size()), mix(options_.seed ^ kBatchOrderSalt, e, 0));
    std::vector<std::pair<int, int64_t>> shuffled(plan.batches.size());
    for (size_t i = 0; i < p.size(); ++i) shuffled[i] = plan.batches[static_cast<size_t>(p[i])];
    plan.batches = std::move(shuffled);
  }
  cached_ = std::move(plan);
  cached_epoch_ = epoch;
  return cached_;
}

std::vector<int64_t> DistributedSampler::batch(int64_t epoch, int64_t k) const {
  if (k < 0 || k >= batches_per_epoch_)
    throw Error(fmt::format("DistributedSampler: batch {} of an epoch of {}", k, batches_per_epoch_));
  const Epoch& plan = epoch_plan(epoch);
  const auto [bucket, kb] = plan.batches[static_cast<size_t>(k)];
  const auto& o = plan.order[static_cast<size_t>(bucket)];
  const int64_t n = static_cast<int64_t>(o.size()), B = options_.batch_size, W = options_.world_size;
  std::vector<int64_t> out(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) {
    // Positions past the end wrap around within the bucket (only without drop_last).
    const int64_t position = options_.shard_affinity ? kb * B + j : options_.rank + (kb * B + j) * W;
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
