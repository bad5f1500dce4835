#include "expert_groups.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"

namespace wt::wantrain {
namespace {

std::vector<std::string> expert_names(const TrainConfig& cfg) {
  const auto names = split_list(cfg.experts);
  if (names.size() != 2 || !((names[0] == "high" && names[1] == "low") || (names[0] == "low" && names[1] == "high")))
    throw UsageError(fmt::format(
        "option --experts: expected high,low (or low,high: the order of the rank groups), got {}", cfg.experts));
  return names;
}

std::string experts_file(const std::string& directory) { return directory + "/experts.json"; }

}  // namespace

void check_expert_options(const TrainConfig& cfg) {
  if (cfg.experts.empty()) {
    for (const char* option : {"expert-ranks", "boundary", "high-noise", "low-noise"})
      if (cfg.given.count(option)) throw UsageError(fmt::format("option --{}: only with --experts high,low", option));
    return;
  }
  expert_names(cfg);
  if (!(cfg.boundary >= 0 && cfg.boundary < 1))
    throw UsageError(
        fmt::format("option --boundary: expected sigma' = timestep / 1000 in (0, 1) (0: the release's), "
                    "got {}",
                    cfg.boundary));
  if (!cfg.timestep_range.empty())
    throw UsageError("option --timestep-range: not with --experts: each expert trains on its side of --boundary");
  if (cfg.mode != "train") throw UsageError("option --experts: with --mode train only yet");
  // A sample of an A14B model needs both experts, which train on different ranks.
  if (cfg.sample_every > 0 && cfg.sample_ranks == 0)
    throw UsageError(
        "option --sample-every: with --experts, give --sample-ranks K: a sample needs both experts, and each "
        "group holds one; K ranks of their own receive both and draw it");
  for (const auto& [option, path] : {std::pair{"high-noise", cfg.high_noise}, {"low-noise", cfg.low_noise}})
    if (const auto why = path.empty() ? std::string() : unreadable_file_reason(path); !why.empty())
      throw UsageError(fmt::format("option --{}: {}: {}", option, path, why));
}

ExpertLayout expert_layout(const TrainConfig& cfg, int job_ranks, const std::optional<wan::WanConfig>& model) {
  const auto names = expert_names(cfg);
  std::vector<int> ranks;
  if (cfg.expert_ranks.empty()) {
    if (job_ranks % 2 != 0)
      throw UsageError(
          fmt::format("option --expert-ranks: the job's {} ranks do not split in halves: give H,L", job_ranks));
    ranks = {job_ranks / 2, job_ranks / 2};
  } else {
    for (const auto& part : split_list(cfg.expert_ranks)) {
      char* end = nullptr;
      const long value = std::strtol(part.c_str(), &end, 10);
      ranks.push_back(part.empty() || *end != '\0' || value > job_ranks ? -1 : int(value));
    }
    if (ranks.size() != 2 || ranks[0] < 1 || ranks[1] < 1)
      throw UsageError(
          fmt::format("option --expert-ranks: expected H,L, two rank counts of 1 or more, got {}", cfg.expert_ranks));
    if (ranks[0] + ranks[1] != job_ranks)
      throw UsageError(
          fmt::format("option --expert-ranks: {} ranks, but the job has {}", ranks[0] + ranks[1], job_ranks));
  }
  ExpertLayout layout;
  layout.boundary =
      cfg.boundary > 0 ? cfg.boundary : wan::release_boundary(model ? model->model_type : wan::ModelType::T2V);
  int first = 0;
  for (size_t g = 0; g < 2; ++g) {
    ExpertGroup group;
    group.name = names[g];
    group.folder = names[g] + "_noise_model";
    group.first_rank = first;
    group.ranks = ranks[g];
    first += ranks[g];
    group.sigma_lo = group.name == "high" ? layout.boundary : 0.0;
    group.sigma_hi = group.name == "high" ? 1.0 : layout.boundary;
    if (group.ranks % cfg.sp != 0)
      throw UsageError(
          fmt::format("option --sp: is {}: it must divide each expert group's ranks, and the {} group "
                      "has {} (--expert-ranks)",
                      cfg.sp, group.name, group.ranks));
    layout.groups.push_back(group);
  }
  return layout;
}

const ExpertGroup& ExpertLayout::group_of(int rank) const {
  for (const auto& group : groups)
    if (rank >= group.first_rank && rank < group.first_rank + group.ranks) return group;
  throw std::logic_error(fmt::format("rank {} is in no expert group", rank));
}

std::string ExpertLayout::describe() const {
  std::string out = fmt::format("experts: two rank groups, boundary sigma' {:g}\n", boundary);
  for (const auto& g : groups)
    out += fmt::format("  {:<4} ranks {}-{} ({}), sigma' in [{:g}, {:g}], run in {}/\n", g.name, g.first_rank,
                       g.first_rank + g.ranks - 1, g.ranks, g.sigma_lo, g.sigma_hi, g.folder);
  return out;
}

std::string ExpertLayout::to_json() const {
  nlohmann::json out;
  out["boundary"] = boundary;
  for (const auto& g : groups) out["groups"].push_back({{"expert", g.name}, {"folder", g.folder}, {"ranks", g.ranks}});
  return out.dump(2) + "\n";
}

TrainConfig expert_run_config(const TrainConfig& cfg, const ExpertGroup& group) {
  TrainConfig out = cfg;
  out.output_dir = cfg.output_dir + "/" + group.folder;
  const auto& weights = group.name == "high" ? cfg.high_noise : cfg.low_noise;
  if (!weights.empty()) out.init = weights;
  out.timestep_range = fmt::format("{},{}", group.sigma_lo, group.sigma_hi);
  if (!cfg.resume.empty() && cfg.resume != "auto") out.resume = cfg.resume + "/" + group.folder;
  return out;
}

void record_expert_layout(const ExpertLayout& layout, const TrainConfig& cfg, bool write) {
  const std::string resumed = cfg.resume.empty() ? "" : cfg.resume == "auto" ? cfg.output_dir : cfg.resume;
  if (!resumed.empty()) {
    const auto file = experts_file(resumed);
    if (!std::filesystem::exists(file)) {
      if (cfg.resume != "auto")
        throw UsageError(
            fmt::format("option --resume: {} has no experts.json: with --experts give the output "
                        "directory of a --experts run",
                        cfg.resume));
    } else {
      const auto stored = parse_json_or_discarded(read_whole_file(file));
      if (stored.is_discarded()) throw UsageError(fmt::format("{}: not JSON", file));
      if (stored != nlohmann::json::parse(layout.to_json()))
        throw UsageError(fmt::format(
            "option --expert-ranks: {} records {}, this job {}: a group's run continues exactly only on the same "
            "experts, group sizes and boundary",
            file, stored.dump(), nlohmann::json::parse(layout.to_json()).dump()));
    }
  }
  if (!write) return;
  std::error_code error;
  std::filesystem::create_directories(cfg.output_dir, error);
  if (error)
    throw UsageError(fmt::format("option --output-dir: cannot create {}: {}", cfg.output_dir, error.message()));
  write_file_durably(experts_file(cfg.output_dir), layout.to_json());
}

}  // namespace wt::wantrain
