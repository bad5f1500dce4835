#include "scratch_dataset.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "wantrain/distributed/world.hpp"

namespace wt {

ScratchDataset::ScratchDataset(const distributed::World& world, const data::SampleShape& shape, int64_t samples)
    : owner(world.is_root()) {
  std::string pid = std::to_string(getpid());  // rank 0's names the directory
  world.broadcast(pid);
  directory = (std::filesystem::temp_directory_path() / ("wanbench-data-" + pid)).string();
  if (world.is_root()) {
    std::filesystem::create_directories(directory);
    data::ShardWriter writer(data::shard_path(directory, 0), shape, samples, false);
    torch::manual_seed(1);
    for (int64_t i = 0; i < samples; ++i)
      writer.write(i, torch::randn({shape.channels, shape.frames, shape.height, shape.width}),
                   torch::randn({shape.text_len, shape.text_dim}), int32_t(shape.text_len));
  }
  world.barrier();
}

ScratchDataset::~ScratchDataset() {
  std::error_code ignored;
  if (owner) std::filesystem::remove_all(directory, ignored);
}

}  // namespace wt
