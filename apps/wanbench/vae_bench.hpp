// `wanbench vae`: the Wan2.1 video VAE (wan/vae/wan_vae) encoding a random
// video and decoding random latents on this machine: seconds (median) and
// the process's peak RSS; several --frames each in a process of its own, and
// the peak RSS of the last against the first. scripts/vs_torch_encoders.py
// runs it against the PyTorch reference on the same weights and inputs.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_vae_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
