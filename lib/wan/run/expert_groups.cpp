#include "wantrain/wan/run/expert_groups.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"

namespace wt::wan {
namespace {

std::string experts_file(const std::string& directory) { return directory + "/experts.json"; }

}  // namespace

ExpertLayout expert_layout(const TrainSettings& settings, int job_ranks, const std::optional<WanConfig>& model) {
  const auto& experts = *settings.experts;
  std::array<int64_t, 2> ranks{};
  if (!experts.ranks) {
    if (job_ranks % 2 != 0)
      throw SettingError("expert_ranks", fmt::format("the job's {} ranks do not split in halves: give H,L", job_ranks));
    ranks = {job_ranks / 2, job_ranks / 2};
  } else {
    ranks = *experts.ranks;
    if (ranks[0] + ranks[1] != job_ranks)
      throw SettingError("expert_ranks", fmt::format("{} ranks, but the job has {}", ranks[0] + ranks[1], job_ranks));
  }
  const int sp = settings.run.sequence_parallel;
  ExpertLayout layout;
  layout.boundary =
      experts.boundary > 0 ? experts.boundary : release_boundary(model ? model->model_type : ModelType::T2V);
  int first = 0;
  for (size_t g = 0; g < 2; ++g) {
    ExpertGroup group;
    group.name = experts.order[g];
    group.folder = group.name + "_noise_model";
    group.first_rank = first;
    group.ranks = int(ranks[g]);
    first += group.ranks;
    group.sigma_lo = group.name == "high" ? layout.boundary : 0.0;
    group.sigma_hi = group.name == "high" ? 1.0 : layout.boundary;
    if (group.ranks % sp != 0)
      throw SettingError("sp", fmt::format("is {}: it must divide each expert group's ranks, and the {} group has {} "
                                           "({})",
                                           sp, group.name, group.ranks, setting_reference("expert_ranks")));
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

TrainSettings expert_run_settings(const TrainSettings& settings, const ExpertGroup& group) {
  TrainSettings out = settings;
  out.fit.output_dir = settings.fit.output_dir + "/" + group.folder;
  const auto& weights = group.name == "high" ? settings.experts->high_noise : settings.experts->low_noise;
  if (!weights.empty()) out.model_run.init = weights;
  auto& flow = out.model_run.objective.flow;
  flow.sigma_min = group.sigma_lo;
  flow.sigma_max = group.sigma_hi;
  if (!settings.resume.empty() && settings.resume != "auto") out.resume = settings.resume + "/" + group.folder;
  if (out.model_run.sample) out.model_run.sample->directory = out.fit.output_dir + "/samples";
  // The group's own run, as a one-expert run of it would record.
  auto options = parse_json_or_discarded(settings.fit.run_options);
  if (options.is_object()) {
    options[option_name("output_dir")] = out.fit.output_dir;
    options[option_name("init")] = out.model_run.init;
    options[option_name("timestep_range")] = fmt::format("{},{}", group.sigma_lo, group.sigma_hi);
    options[option_name("resume")] = out.resume;
    out.fit.run_options = options.dump();
  }
  return out;
}

void record_expert_layout(const ExpertLayout& layout, const TrainSettings& settings, bool write) {
  const auto& output_dir = settings.fit.output_dir;
  const std::string resumed = settings.resume.empty() ? "" : settings.resume == "auto" ? output_dir : settings.resume;
  if (!resumed.empty()) {
    const auto file = experts_file(resumed);
    if (!std::filesystem::exists(file)) {
      if (settings.resume != "auto")
        throw SettingError("resume",
                           fmt::format("{} has no experts.json: with {} give the output directory of a {} "
                                       "run",
                                       settings.resume, setting_reference("experts"), setting_reference("experts")));
    } else {
      const auto stored = parse_json_or_discarded(read_whole_file(file));
      if (stored.is_discarded()) throw UsageError(fmt::format("{}: not JSON", file));
      if (stored != nlohmann::json::parse(layout.to_json()))
        throw SettingError("expert_ranks",
                           fmt::format("{} records {}, this job {}: a group's run continues exactly only on the same "
                                       "experts, group sizes and boundary",
                                       file, stored.dump(), nlohmann::json::parse(layout.to_json()).dump()));
    }
  }
  if (!write) return;
  std::error_code error;
  std::filesystem::create_directories(output_dir, error);
  if (error) throw SettingError("output_dir", fmt::format("cannot create {}: {}", output_dir, error.message()));
  write_file_durably(experts_file(output_dir), layout.to_json());
}

}  // namespace wt::wan
