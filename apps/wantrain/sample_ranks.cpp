#include "sample_ranks.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "wantrain/app/job_dataset.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/threads.hpp"
#include "wantrain/wan/model/data_fits_model.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/wan/run/sample_group.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"

namespace wt::wantrain {
namespace {

// A source's model from the recipe its training ranks build theirs from
// (wan/run/wan_run.hpp's model_recipe): the same frozen base (from the seed,
// --init, or a few-step student's teacher) and adapters, so that the
// tensors sent in each sample — what is trained — complete it; the blocks'
// Linears held in sample_rank_linear_dtype.
wan::SampleSource sampling_model(const std::string& name, const TrainConfig& cfg, const wan::WanConfig& config,
                                 const at::Device& device, at::ScalarType compute_dtype) {
  auto recipe = wan::model_recipe(wan_run_options(cfg), config, cfg.seed,
                                  cfg.mode == "distill" && cfg.distill_steps > 0 ? cfg.teacher : "");
  recipe.linear_dtype = sample_rank_linear_dtype(cfg, compute_dtype);
  auto built = wan::build_model(recipe);
  built.model->to(device);
  built.model->eval();
  return {name, built.model, built.base_checksum};
}

}  // namespace

at::ScalarType sample_rank_linear_dtype(const TrainConfig& cfg, at::ScalarType compute_dtype) {
  if (cfg.lora_rank > 0) return wan_run_options(cfg).base_dtype;
  return compute_dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

void check_sample_rank_options(const TrainConfig& cfg) {
  if (cfg.sample_ranks < 0) throw UsageError("option --sample-ranks: must be 0 (samples drawn inline) or more");
  if (cfg.sample_ranks > 0 && cfg.sample_every == 0)
    throw UsageError("option --sample-ranks: needs --sample-every N (when the weights go to the sample ranks)");
}

int run_sample_ranks(const distributed::World& group, const TrainConfig& cfg, const SampleRanks& samples,
                     const ExpertLayout* experts) {
  const int ranks = group.size();
  const data::Dataset dataset = app::open_job_dataset(group, cfg.data, cfg.shard_affinity);
  wan::WanConfig config;
  group.agree([&] {
    config = wan::load_model_config(cfg.model_config);
    wan::check_data_fits_model(dataset, config, cfg.model_config);
  });
  torch::set_num_threads(threads_per_rank(cfg.threads, group.local_size()));
  std::unique_ptr<distributed::Comm> comm;
  group.agree([&] {
    distributed::CommOptions comm_options;
    comm_options.timeout = app::comm_timeout(cfg);
    comm = distributed::make_comm(group, distributed::choose_backend(group, requested_backend(cfg)), comm_options);
  });
  const auto device = comm->device();
  at::ScalarType compute_dtype = at::kFloat;
  group.agree([&] { compute_dtype = run_settings(cfg, device).compute_dtype; });

  // What is drawn: the training sample (its PNG from rank 0), the prompts'
  // videos (decoded and written by rank 0; the others hold their share of
  // each video's tokens).
  auto sample_options = *wan_run_options(cfg).sample;
  sample_options.compute_dtype = compute_dtype;
  if (!group.is_root()) sample_options.directory.clear();
  std::unique_ptr<wan::TrainingSampler> sampler;
  group.agree([&] { sampler = std::make_unique<wan::TrainingSampler>(dataset, sample_options); });
  std::unique_ptr<wan::PromptVideos> videos;
  group.agree([&] {
    if (cfg.sample_prompts.empty()) return;
    const auto& shape = dataset.shape_of(cfg.sample_index < dataset.size() ? cfg.sample_index : 0);
    auto options = prompt_video_options(cfg, wan::read_sample_prompts(cfg.sample_prompts),
                                        {shape.frames, shape.height, shape.width}, compute_dtype, 0, 1);
    options.decode = group.is_root();
    videos = std::make_unique<wan::PromptVideos>(config, options, device);
  });

  // The sources' models, and the receiver of their weights (rank 0).
  std::vector<wan::SampleSource> sources;
  std::vector<int> source_ranks;
  group.agree([&] {
    if (experts) {
      for (const auto& g : experts->groups) {
        sources.push_back(sampling_model(g.name, expert_run_config(cfg, g), config, device, compute_dtype));
        source_ranks.push_back(g.first_rank);
      }
    } else {
      sources.push_back(sampling_model("", cfg, config, device, compute_dtype));
      source_ranks.push_back(0);
    }
  });
  if (ranks > 1)
    for (auto& source : sources) source.model->set_sequence_parallel(comm.get());

  wan::SampleGroupOptions options;
  options.boundary = experts ? experts->boundary : 0;
  options.metrics_path = cfg.output_dir + "/samples/metrics.jsonl";
  if (cfg.tensorboard) options.tensorboard_dir = cfg.output_dir + "/tb/samples";
  std::unique_ptr<train::SampleReceiver> receiver;
  group.agree([&] {
    if (!group.is_root()) return;
    // A resumed run's sample log continues from its checkpoint's step.
    const auto run_dir = experts ? expert_run_config(cfg, experts->groups.front()) : cfg;
    if (!cfg.resume.empty())
      if (const auto path = ckpt::resolve_resume(run_dir.resume, run_dir.output_dir))
        options.first_step = ckpt::read_trainer_state(*path).step;
    std::error_code error;
    std::filesystem::create_directories(cfg.output_dir + "/samples", error);
    if (error)
      throw UsageError(
          fmt::format("option --output-dir: cannot create {}/samples: {}", cfg.output_dir, error.message()));
    receiver = std::make_unique<train::SampleReceiver>(samples.channel, source_ranks);
    double held = 0;  // what each sample rank holds of the models
    for (const auto& source : sources)
      for (const auto& parameter : source.model->parameters()) held += double(parameter.nbytes());
    report_info(
        "sample ranks {}-{}: every {} steps they receive the {} and draw the sample{}{}, into {}/samples; each "
        "holds {} of weights",
        samples.first_rank, samples.first_rank + ranks - 1, cfg.sample_every,
        experts ? "two experts' weights" : "weights", videos ? " and the prompts' videos" : "",
        ranks > 1 ? fmt::format(", each video's tokens split over the {} of them", ranks) : "", cfg.output_dir,
        wan::format_bytes(held));
  });
  return wan::run_sample_group(group, receiver.get(), sources, *sampler, videos.get(), options, *comm);
}

}  // namespace wt::wantrain
