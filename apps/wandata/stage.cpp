// wandata stage: copy to a node's local disk the shards that its ranks
// read with `wantrain --shard-affinity`, as whole files. Rank r reads
// shards r, r + W, ... of the dataset's sorted list; ranks are placed on the
// nodes in blocks (rank r on node r / K with K ranks per node), as wanrun's
// ppr mapping and srun's default distribution place them.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "commands.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/data/sampler.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"

namespace wt {

namespace fs = std::filesystem;

int run_stage(int argc, char** argv) {
  std::string config, out;
  std::vector<std::string> sources;
  int64_t ranks = 0, ranks_per_node = 1, node = -1;
  OptionSet options("wandata stage", "DIR --out LOCAL_DIR --ranks W [--ranks-per-node K] --node N");
  options.group("stage")
      .standard_options(&config)
      .positional("data", &sources, "the dataset on shared storage", 1)
      .add("out", &out, "the node-local directory (created; shards of the dataset there are replaced)")
      .add("ranks", &ranks, "ranks of the training job (W)")
      .add("ranks-per-node", &ranks_per_node, "ranks on each node (K); rank r runs on node r / K")
      .add("node", &node, "this node's index among the job's nodes, from 0 ($SLURM_NODEID)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (sources.empty()) throw UsageError("wandata stage: give the dataset directory");
  if (out.empty()) throw UsageError("option --out: the node-local directory is required");
  if (ranks < 1) throw UsageError("option --ranks: the training job's rank count is required (at least 1)");
  if (ranks_per_node < 1 || ranks % ranks_per_node != 0)
    throw UsageError(fmt::format("option --ranks-per-node: must divide the {} ranks", ranks));
  const int64_t nodes = ranks / ranks_per_node;
  if (node < 0 || node >= nodes)
    throw UsageError(fmt::format("option --node: must be between 0 and {} ({} ranks, {} per node)", nodes - 1, ranks,
                                 ranks_per_node));

  const auto paths = data::Dataset::shard_paths(sources.front());
  std::set<std::string> names;
  for (const auto& p : paths) names.insert(fs::path(p).filename().string());
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw UsageError(fmt::format("option --out: cannot create {}: {}", out, ec.message()));
  // A shard of another dataset would join this one in the job's view of it.
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".h5" && names.count(it->path().filename().string()) == 0)
      throw UsageError(fmt::format("option --out: {} holds {}, which is not a shard of {}: use an empty directory", out,
                                   it->path().filename().string(), sources.front()));
  if (ec) throw UsageError(fmt::format("option --out: cannot list {}: {}", out, ec.message()));

  int64_t copied = 0, bytes = 0;
  for (size_t s = 0; s < paths.size(); ++s) {
    const int rank = data::shard_affinity_rank(static_cast<int64_t>(s), static_cast<int>(ranks));
    if (rank / ranks_per_node != node) continue;
    const fs::path target = fs::path(out) / fs::path(paths[s]).filename();
    const fs::path part = target.string() + ".part";  // never a half-copied shard under its name
    fs::copy_file(paths[s], part, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(part, target, ec);
    if (ec) {
      std::error_code ignored;
      fs::remove(part, ignored);  // no half copy left behind
      throw UsageError(fmt::format("wandata stage: cannot copy {} to {}: {}", paths[s], target.string(), ec.message()));
    }
    ++copied;
    bytes += static_cast<int64_t>(fs::file_size(target));
  }
  // The whole dataset's shard names, for the job (see kStagedShardList).
  const fs::path list = fs::path(out) / data::kStagedShardList;
  {
    std::ofstream file(list.string() + ".part");
    file << "# the shards of " << sources.front() << "; this node holds those its ranks read (wandata stage)\n";
    for (const auto& name : names) file << name << "\n";
    if (!file.flush()) throw UsageError(fmt::format("wandata stage: cannot write {}", list.string()));
  }
  fs::rename(list.string() + ".part", list, ec);
  if (ec) throw UsageError(fmt::format("wandata stage: cannot write {}: {}", list.string(), ec.message()));
  std::cout << fmt::format(
      "wandata stage: node {} of {} (ranks {}-{} of {}): copied {} of the {} shards ({:.1f} MB) to {}\n", node, nodes,
      node * ranks_per_node, (node + 1) * ranks_per_node - 1, ranks, copied, paths.size(), double(bytes) / 1e6, out);
  return kExitOk;
}

}  // namespace wt
