#include "wantrain/wan/run/sample_ranks.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/train/job_dataset.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/threads.hpp"
#include "wantrain/wan/model/data_fits_model.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/run/sample_group.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"

namespace wt::wan {
namespace {

// A source's model from the recipe its training ranks build theirs from
// (wan_run.hpp's model_recipe): the same frozen base (from the seed, init
// weights, or a few-step student's teacher) and adapters, so that the
// tensors sent in each sample — what is trained — complete it; the blocks'
// Linears held in sample_rank_linear_dtype.
SampleSource sampling_model(const std::string& name, const TrainSettings& settings, const WanConfig& config,
                            const at::Device& device) {
  const bool few_step = settings.distill && settings.model_run.few_step;
  auto recipe = model_recipe(settings.model_run, config, settings.run.seed, few_step ? settings.distill->teacher : "");
  recipe.linear_dtype = sample_rank_linear_dtype(settings);
  auto built = build_model(recipe);
  built.model->to(device);
  built.model->eval();
  return {name, built.model, built.base_checksum};
}

}  // namespace

at::ScalarType sample_rank_linear_dtype(const TrainSettings& settings) {
  if (settings.model_run.lora.rank > 0) return settings.model_run.base_dtype;
  if (settings.model_run.vace_branch_only) return at::kFloat;  // the frozen base as trained: its checksum
  return settings.run.compute_dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

int run_sample_ranks(const distributed::World& group, const TrainSettings& settings, const SampleRanks& samples,
                     const ExpertLayout* experts) {
  const int ranks = group.size();
  const data::Dataset dataset = train::open_job_dataset(group, settings.data, settings.run.shard_affinity);
  WanConfig config;
  group.agree([&] {
    config = load_model_config(settings.model_config);
    check_data_fits_model(dataset, config, settings.model_config);
  });
  torch::set_num_threads(threads_per_rank(settings.threads, group.local_size()));
  std::unique_ptr<distributed::Comm> comm;
  group.agree([&] {
    distributed::CommOptions comm_options;
    comm_options.timeout = settings.comm_timeout;
    comm = distributed::make_comm(group, distributed::choose_backend(group, settings.backend), comm_options);
  });
  const auto device = comm->device();
  const at::ScalarType compute_dtype = settings.run.compute_dtype;
  group.agree([&] {
    if (compute_dtype == at::kHalf && !device.is_cuda())
      throw SettingError("precision", "fp16 needs CUDA devices (dynamic loss scaling); on CPU use bf16");
  });
  const auto& output_dir = settings.fit.output_dir;

  // What is drawn: the training sample (its PNG from rank 0), the prompts'
  // videos (decoded and written by rank 0; the others hold their share of
  // each video's tokens).
  auto sample_options = *settings.model_run.sample;
  sample_options.compute_dtype = compute_dtype;
  if (!group.is_root()) sample_options.directory.clear();
  std::unique_ptr<TrainingSampler> sampler;
  group.agree([&] { sampler = std::make_unique<TrainingSampler>(dataset, sample_options); });
  std::unique_ptr<PromptVideos> videos;
  group.agree([&] {
    if (settings.prompt_videos.prompts_file.empty()) return;
    const auto& shape = dataset.shape_of(settings.sample_index < dataset.size() ? settings.sample_index : 0);
    auto options = settings.prompt_videos;
    options.prompts = read_sample_prompts(options.prompts_file);
    options.latents = {shape.frames, shape.height, shape.width};
    options.compute_dtype = compute_dtype;
    options.decode = group.is_root();
    videos = std::make_unique<PromptVideos>(config, options, device);
  });

  // The sources' models, and the receiver of their weights (rank 0).
  std::vector<SampleSource> sources;
  std::vector<int> source_ranks;
  group.agree([&] {
    if (experts) {
      for (const auto& g : experts->groups) {
        sources.push_back(sampling_model(g.name, expert_run_settings(settings, g), config, device));
        source_ranks.push_back(g.first_rank);
      }
    } else {
      sources.push_back(sampling_model("", settings, config, device));
      source_ranks.push_back(0);
    }
  });
  if (ranks > 1)
    for (auto& source : sources) source.model->set_sequence_parallel(comm.get());

  SampleGroupOptions options;
  options.boundary = experts ? experts->boundary : 0;
  options.metrics_path = output_dir + "/samples/metrics.jsonl";
  if (settings.fit.tensorboard) options.tensorboard_dir = output_dir + "/tb/samples";
  std::unique_ptr<train::SampleReceiver> receiver;
  group.agree([&] {
    if (!group.is_root()) return;
    // A resumed run's sample log continues from its checkpoint's step.
    const auto run = experts ? expert_run_settings(settings, experts->groups.front()) : settings;
    if (!settings.resume.empty())
      if (const auto path = ckpt::resolve_resume(run.resume, run.fit.output_dir))
        options.first_step = ckpt::read_trainer_state(*path).step;
    std::error_code error;
    std::filesystem::create_directories(output_dir + "/samples", error);
    if (error)
      throw SettingError("output_dir", fmt::format("cannot create {}/samples: {}", output_dir, error.message()));
    receiver = std::make_unique<train::SampleReceiver>(samples.channel, source_ranks);
    double held = 0;  // what each sample rank holds of the models
    for (const auto& source : sources)
      for (const auto& parameter : source.model->parameters()) held += double(parameter.nbytes());
    report_info(
        "sample ranks {}-{}: every {} steps they receive the {} and draw the sample{}{}, into {}/samples; each "
        "holds {} of weights",
        samples.first_rank, samples.first_rank + ranks - 1, settings.fit.sample_every,
        experts ? "two experts' weights" : "weights", videos ? " and the prompts' videos" : "",
        ranks > 1 ? fmt::format(", each video's tokens split over the {} of them", ranks) : "", output_dir,
        format_bytes(held));
  });
  return run_sample_group(group, receiver.get(), sources, *sampler, videos.get(), options, *comm);
}

}  // namespace wt::wan
