#include "scratch_dataset.hpp"

#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt {

ScratchDataset::ScratchDataset(const distributed::World& world, const data::SampleShape& shape, int64_t samples)
    : owner(world.is_root()) {
  int64_t pid = getpid();  // rank 0's names the directory
  MPI_CHECK(MPI_Bcast(&pid, 1, MPI_INT64_T, 0, world.comm()));
  directory = (std::filesystem::temp_directory_path() / fmt::format("wanbench-data-{}", pid)).string();
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
