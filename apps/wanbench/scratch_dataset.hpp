// A throw-away dataset for benchmarks: random samples of a given shape,
// written by rank 0 into a private temporary directory removed at exit.
#pragma once

#include <cstdint>
#include <string>

#include "wantrain/data/shard.hpp"

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {

struct ScratchDataset {
  std::string directory;
  bool owner;
  // Collective: every rank gets the same directory; `samples` of `shape`.
  ScratchDataset(const distributed::World& world, const data::SampleShape& shape, int64_t samples);
  ~ScratchDataset();
  ScratchDataset(const ScratchDataset&) = delete;
  ScratchDataset& operator=(const ScratchDataset&) = delete;
};

}  // namespace wt
