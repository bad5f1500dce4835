#include "util/process.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <array>

namespace wt {

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "unknown-host";
  return buf.data();
}

std::string process_label() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return host_name();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return fmt::format("rank {}/{} on {}", rank, size, host_name());
}

}  // namespace wt
