// Reducer: data-parallel gradient synchronisation (the DDP engine).
//
// Contract. Every rank constructs its Reducer over the same parameters (same
// names, shapes, order) and runs the same sequence of steps; each step is
//   zero_grad();  K times { prepare_for_backward(sync = last micro-step); backward; finalize_backward(); }
// Construction is collective: it checks that the parameters agree on all
// ranks (UsageError naming the first that differs), then broadcasts
// parameters and buffers from rank 0.
//
// Gradients live in flat bucket buffers: each parameter's .grad() is a view
// into its bucket, so there is no second copy. Buckets hold parameters in
// reverse registration order (the order backward produces them), the first
// capped at `first_bucket_bytes`, the others at `bucket_bytes` (a bucket is
// closed once it reaches its cap). On a synchronising micro-step a hook on
// each parameter's gradient accumulator counts it ready; when a bucket is
// complete its all-reduce (average over ranks) is started at once, buckets
// strictly in index order, so the collectives are issued in the same order
// on every rank while the rest of backward runs. Non-synchronising
// micro-steps only accumulate, with no communication.
//
// With `shard` (ZeRO stage 1) a bucket is reduce-scattered instead: its
// buffer is padded to a multiple of 16 x world size elements, and rank r
// receives the reduced slice r of it (gradient_shards()), the part of the
// model whose optimizer state it keeps; the full buffers then hold only this
// rank's own (unreduced) gradients.
//
// With `transient_buckets` as well (ZeRO stage 2) no whole gradient is kept:
// every backward synchronises, a gradient is copied into its bucket as it
// arrives (in the wire dtype) and the parameter's .grad dropped; a bucket's
// buffer exists from its first gradient until its reduce-scatter is done,
// at most `buckets_in_flight` of them reducing at once, and the reduced
// slices accumulate over the micro-steps in gradient_shards().
//
// A parameter that got no gradient in a whole step is an error on every rank
// naming it (one extra 4-byte all-reduce per step makes the ranks agree), or
// with allow_unused its zero slot is reduced like the rest.
//
// Threads: hooks run on the autograd engine's thread; the Comm is used from
// one thread at a time (backward, then finalize on the caller's thread).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/distributed/comm.hpp"

namespace wt::distributed {

struct ReducerOptions {
  int64_t first_bucket_bytes = int64_t(1) << 20;   // 1 MiB: communication starts early in backward
  int64_t bucket_bytes = 25 * (int64_t(1) << 20);  // --bucket-mb
  bool allow_unused = false;                       // --allow-unused
  // false: sum instead of average, for a caller that already divided its loss
  // by the world size (which saves a pass over every gradient after the sum).
  bool average = true;
  bool shard = false;  // reduce-scatter each bucket (ZeRO-1) instead of all-reducing it
  // With shard: bucket buffers only while they reduce, every micro-step (ZeRO-2).
  bool transient_buckets = false;
  // Transient buckets reducing at once before backward waits for the oldest:
  // the bound on the gradient memory beyond the slices.
  int buckets_in_flight = 2;
  // The dtype gradients travel in (the run's grad_comm_dtype): the buckets' own
  // (kFloat), or kBFloat16 / kHalf, as PyTorch DDP's compression hooks do:
  // a full bucket is narrowed into a 16-bit copy, that copy is summed over
  // the ranks, and the sum is widened back into the bucket (then averaged):
  // half the bytes on the wire, the sum rounded to 16 bits.
  at::ScalarType comm_dtype = at::kFloat;
  // Set (ZeRO-3): buckets are the runs of consecutive parameters (in bucket
  // order) of one unit, whatever their size, so that a bucket's slices are
  // a unit's shards. Units are in the reverse order of their first
  // parameter's registration (a unit's parameters registered in two places
  // are one run); those of unit "" (a model's input side, whose gradients
  // come last) go after all others, so that no bucket waits for them
  // (buckets launch in index order).
  std::function<std::string(const std::string& name)> unit_of;
  // Set: a bucket never holds parameters of two groups (a trained group
  // is clipped and updated on its own buckets).
  std::function<std::string(const std::string& name)> group_of;
  // Called on the autograd thread, under the Reducer's lock, when the last
  // gradient of a bucket arrived in a synchronising backward (before its
  // reduction starts): ZeRO-3 releases the unit's gathered weights there.
  std::function<void(size_t bucket)> on_bucket_ready;
};

// Where the reduced parameters lie in the flat buckets (padded in shard mode).
struct BucketLayout {
  struct Entry {
    std::string name;
    int64_t offset = 0;  // elements into the bucket
    int64_t numel = 0;
  };
  std::vector<Entry> entries;  // in bucket order (reverse registration order)
  int64_t numel = 0;           // of the buffer, padding included
};

class Reducer {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
  // `parameters` in registration order; only those requiring grad are
  // reduced (all are checked and broadcast). `buffers` are broadcast.
  Reducer(Comm& comm, NamedTensors parameters, std::vector<at::Tensor> buffers, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Takes each parameter's gradient accumulator again: after Tensor::set_data
  // changed a parameter's dtype (ZeRO-3's bf16 gathers), autograd made the
  // old one stale and the next backward would not reach its hook.
  void refresh_accumulators();
  // Zeroes every gradient (the bucket buffers) at the start of a step.
  void zero_grad();
  // Before each backward: `sync` on the last micro-step of a step.
  void prepare_for_backward(bool sync);
  // After each backward: on a synchronising micro-step, starts what is left,
  // waits for every bucket and checks for parameters without a gradient
  // (unless allow_unused: one all-reduce and one host read, UsageError
  // naming them on every rank).
  void finalize_backward();
  // The same without the check, for a caller that folds this rank's
  // unused_parameters() into a reduction of its own (the Engine's one
  // all-reduce per step) and then calls check_unused with their sum.
  void finalize_backward_unchecked();
  // Parameters without a gradient on the last synchronising micro-step, on this rank.
  int64_t unused_parameters() const;
  // Throws what finalize_backward does when `over_ranks` (the sum of every
  // rank's unused_parameters()) is not 0; nothing with allow_unused.
  void check_unused(int64_t over_ranks) const;

  // Introspection for tests, benchmarks and logs.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // The buckets' whole gradient buffers (undefined with transient_buckets).
  std::vector<at::Tensor> bucket_buffers() const;
  // Bytes of the gradient buffers that exist now (buckets, their 16-bit
  // copies, slices): what a memory test measures.
  int64_t gradient_bytes() const;
  std::vector<BucketLayout> bucket_layouts() const;
  // Shard mode: per bucket, this rank's slice of the reduced gradients
  // ([bucket numel / world size], valid after a synchronising finalize_backward).
  std::vector<at::Tensor> gradient_shards() const;
  int64_t collectives_issued() const;        // bucket all-reduces so far
  double last_exposed_comm_seconds() const;  // time finalize_backward waited for buckets

  struct State;  // defined in reducer.cpp; the autograd hooks hold it weakly

 private:
  std::shared_ptr<State> state_;
};

}  // namespace wt::distributed
