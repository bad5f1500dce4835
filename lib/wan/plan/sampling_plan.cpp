#include "wantrain/wan/plan/sampling_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "wantrain/wan/plan/memory_plan.hpp"

namespace wt::wan {

SamplingPlan plan_sampling_job(const SamplingJob& job) {
  const auto memory =
      plan_sampling(job.config, job.step, job.experts, /*offload_experts=*/false, job.block_linear_dtype);
  SamplingPlan plan;
  plan.ranks = job.ranks;
  // Sharded: 1/N of each expert, plus the two blocks gathered at once (the
  // one computing and the next); the root's share is small beside them.
  const double block = memory.expert_bytes / double(std::max<int64_t>(1, job.config.num_layers));
  plan.dit_bytes = job.shard_weights && job.ranks > 1
                       ? double(job.experts) * memory.expert_bytes / double(job.ranks) + 2 * block
                       : double(job.experts) * memory.expert_bytes;
  const double vae_elsewhere = job.picture ? job.vae_bytes : 0;  // the other ranks keep the VAE only for a picture
  const double clip = job.picture ? job.clip_bytes : 0;
  plan.phases.push_back({"encoders (umT5 on rank 0, then freed; CLIP and the VAE for --image)",
                         job.t5_bytes + job.vae_bytes + clip, vae_elsewhere + clip});
  plan.phases.push_back({"sampling (the DiT weights, one forward's activations)",
                         plan.dit_bytes + memory.forward_bytes + job.vae_bytes,
                         plan.dit_bytes + memory.forward_bytes + vae_elsewhere});
  if (job.vae_bytes > 0)
    plan.phases.push_back({job.decode_tiled ? "decoding on rank 0 (the DiT freed; the VAE, tile by tile)"
                                            : "decoding on rank 0 (the DiT freed; the VAE and its activations)",
                           job.vae_bytes + job.decode_bytes, 0});
  return plan;
}

double SamplingPlan::peak(bool rank0) const {
  double most = 0;
  for (const auto& phase : phases) most = std::max(most, rank0 ? phase.rank0 : phase.other);
  return most;
}

std::string SamplingPlan::table() const {
  std::string out = ranks > 1 ? fmt::format("  {:<72} {:>10} {:>12}\n", "phase", "rank 0", "other ranks")
                              : fmt::format("  {:<72} {:>10}\n", "phase", "bytes");
  auto row = [&](const std::string& name, double rank0, double other) {
    out += ranks > 1 ? fmt::format("  {:<72} {:>10} {:>12}\n", name, format_bytes(rank0), format_bytes(other))
                     : fmt::format("  {:<72} {:>10}\n", name, format_bytes(rank0));
  };
  for (const auto& phase : phases) row(phase.name, phase.rank0, phase.other);
  row("peak", peak(true), peak(false));
  return out;
}

}  // namespace wt::wan
