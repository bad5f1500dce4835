// How many CPU threads each rank's LibTorch should use.
#pragma once

namespace wt {

// `requested` when positive; otherwise the cores this rank may use: those a
// launcher bound it to, else the node's cores shared among its ranks.
int threads_per_rank(int requested, int ranks_on_node);

}  // namespace wt
