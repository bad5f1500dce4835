// wansample --dry-run: what a sampling job holds on each rank, phase by
// phase, before anything large is read. The phases follow wansample's
// order: the encoders (umT5 on rank 0 alone, CLIP and the VAE's encode of a
// picture), then the solver's forwards (the DiT or both experts, whole or
// sharded, one forward's activations split by the sequence split), then
// rank 0's VAE decode (its activations: plan/decode_memory.hpp), the DiT
// freed before it and the other ranks done. umT5 and CLIP are freed after
// their phase; the VAE stays from the first to the last.
#pragma once

#include <string>
#include <vector>

#include "wantrain/wan/plan/activation_memory.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

struct SamplingJob {
  WanConfig config;
  ActivationSettings step;  // the sample's latents, compute dtype, attention, sequence split
  int experts = 1;
  at::ScalarType block_linear_dtype = at::kFloat;
  int ranks = 1;
  bool shard_weights = false;
  double t5_bytes = 0, clip_bytes = 0, vae_bytes = 0;  // weights in the dtype they compute in; 0: not loaded
  bool picture = false;                                // --image: every rank encodes it with the VAE (and CLIP)
  double decode_bytes = 0;                             // the VAE decode's activations on rank 0
  bool decode_tiled = false;                           // ... through tiles (vae_tiling.hpp)
};

struct SamplingPhase {
  std::string name;
  double rank0 = 0, other = 0;  // bytes held at once (other: ranks 1..N-1)
};

struct SamplingPlan {
  std::vector<SamplingPhase> phases;
  double dit_bytes = 0;  // a rank's DiT weights (all experts)
  int ranks = 1;
  double peak(bool rank0) const;
  std::string table() const;  // one line a phase and the peak, per rank kind
};

SamplingPlan plan_sampling_job(const SamplingJob& job);

}  // namespace wt::wan
