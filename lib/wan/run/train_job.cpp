#include "wantrain/wan/run/train_job.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/backend.hpp"
#include "wantrain/train/fit.hpp"
#include "wantrain/train/job_dataset.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/process.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/test_hooks.hpp"
#include "wantrain/util/threads.hpp"
#include "wantrain/wan/model/data_fits_model.hpp"
#include "wantrain/wan/model/projection.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/wan/run/expert_groups.hpp"
#include "wantrain/wan/run/run_memory.hpp"
#include "wantrain/wan/run/sample_ranks.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"

namespace wt::wan {
namespace {

// With experts: the job, its groups and this rank's, for train() on the group.
struct ExpertRun {
  const distributed::World& job;
  const ExpertLayout& layout;
  const ExpertGroup& group;
};

// What the start-up checks found: the data, the model's and the teacher's
// configs, and the banner's lines about them.
struct JobInputs {
  std::optional<data::Dataset> dataset;
  std::optional<WanConfig> model_config, teacher_config;
  std::string model_summary = "model: none given (" + setting_reference("model_config") + ")\n";
  const data::Dataset* data() const { return dataset ? &*dataset : nullptr; }
};

// The model config, and whether the data fit it.
void check_model(const distributed::World& world, const TrainSettings& settings, JobInputs& in) {
  world.agree([&] {
    if (settings.model_config.empty()) return;
    const auto& path = settings.model_config;
    const auto config = load_model_config(path);
    in.model_config = config;
    if ((settings.model_run.lora.vace_only || settings.model_run.vace_branch_only) && !config.vace())
      throw SettingError("trainable", fmt::format("vace trains a VACE model's VACE branch, and model config {} ({}) "
                                                  "has none",
                                                  path, model_type_name(config.model_type)));
    for (const auto& [setting, p] : {std::pair{"control_drop", settings.model_run.objective.control_drop},
                                     {"start_drop", settings.model_run.objective.start_drop}})
      if (p > 0 && !config.fun_control())
        throw SettingError(setting, fmt::format("model config {} ({}) is not a Fun-Control model, whose control and "
                                                "start frame it drops",
                                                path, model_type_name(config.model_type)));
    if (in.dataset) check_data_fits_model(*in.dataset, config, path);
    if (settings.model_run.objective.ref_drop > 0 &&
        (config.reference_y_channels() == 0 || !in.dataset ||
         in.dataset->largest_shape().condition_channels != config.reference_y_channels()))
      throw SettingError("ref_drop",
                         fmt::format("drops the reference frame that a Fun-Control V1.1 model (add_ref_conv) is shown "
                                     "from data of wandata encode --condition fun-control-ref; model config {} and "
                                     "the data are not both that",
                                     path));
    if (!settings.val_data.empty()) check_data_fits_model(data::Dataset::open(settings.val_data), config, path);
    if (settings.model_run.objective.image_drop > 0 && !config.image_branch())
      throw SettingError("image_drop", fmt::format("model config {} ({}) has no CLIP branch whose features could be "
                                                   "dropped",
                                                   path, model_type_name(config.model_type)));
    if ((config.vace() || config.fun_control()) && !settings.prompt_videos.prompts_file.empty())
      throw SettingError("sample_prompts", fmt::format("model config {} is a {} model, and a prompt file gives no "
                                                       "control: sample from the data's own (the training sample)",
                                                       path, config.vace() ? "VACE" : "Fun-Control"));
    if (settings.first_frame() && config.holds_start_frame())
      throw SettingError("condition", fmt::format("model config {} is Wan2.2-Fun-5B-Control, which holds each "
                                                  "sample's start frame where its data show one ({} drops it); "
                                                  "first-frame is for ti2v models",
                                                  path, setting_reference("start_drop")));
    if (settings.first_frame() && config.model_type != ModelType::TI2V)
      throw SettingError("condition", fmt::format("the first-frame condition is Wan2.2 TI2V's: model config {} is {}, "
                                                  "not ti2v (set \"model_type\": \"ti2v\")",
                                                  path, model_type_name(config.model_type)));
    const int64_t params = parameter_count(config);
    in.model_summary = fmt::format(
        "model: {}: {} parameters ({:.1f} MB in fp32), dim {}, {} layers, {} heads of {}{}\n", path, params,
        double(params) * 4 / 1e6, config.dim, config.num_layers, config.num_heads, config.head_dim(),
        config.model_type == ModelType::T2V
            ? std::string()
            : fmt::format(", {}{}{}", model_type_name(config.model_type),
                          config.holds_start_frame()       ? " (Wan2.2-Fun-5B-Control: a start held as frame 0)"
                          : config.fun_control_with_mask() ? " (Wan2.2-Fun-Control)"
                          : config.fun_control() ? (config.ref_conv ? " (Fun-Control V1.1)" : " (Fun-Control)")
                                                 : "",
                          config.image_branch() ? " with the CLIP branch" : ""));
  });
  // Sequence parallelism: whole groups of ranks, and heads that split over one.
  world.agree([&] {
    const int sp = settings.run.sequence_parallel;
    if (sp == 1) return;
    if (world.size() % sp != 0)
      throw SettingError("sp", fmt::format("is {}: it must divide the job's {} ranks (groups of consecutive ranks)", sp,
                                           world.size()));
    if (in.model_config && in.model_config->num_heads % sp != 0)
      throw SettingError("sp", fmt::format("is {}: model config {}'s {} heads do not split over {} ranks", sp,
                                           settings.model_config, in.model_config->num_heads, sp));
  });
}

// Distillation: the teacher's config, whether the data fit it too, and
// whether the student can be projected from it, before any weights load.
void check_teacher(const distributed::World& world, const TrainSettings& settings, JobInputs& in) {
  world.agree([&] {
    if (!settings.distill) return;
    const auto& distill = *settings.distill;
    const auto& run = settings.model_run;
    const auto config = resolve_teacher_config(distill.teacher, distill.teacher_config);
    in.teacher_config = config;
    const std::string source =
        (distill.teacher_config.empty() ? "the config stored in " + setting_reference("teacher") + " " + distill.teacher
                                        : setting_reference("teacher_config") + " " + distill.teacher_config) +
        " (the teacher's)";
    const std::string model_config = setting_reference("model_config") + " " + settings.model_config;
    // The distillation objectives, the projection and the teacher's stills know no VACE context yet.
    if (config.vace() || (in.model_config && in.model_config->vace()))
      throw SettingError("mode", fmt::format("distillation of a VACE model is not in wantrain yet ({} is {}{})", source,
                                             model_type_name(config.model_type),
                                             in.model_config ? fmt::format(", {} is {}", model_config,
                                                                           model_type_name(in.model_config->model_type))
                                                             : std::string()));
    // The held start frame is the few-step objective's (its first-frame path); the teacher-to-student
    // objective keeps every frame of x_t as it is.
    if (config.holds_start_frame() && !run.few_step)
      throw SettingError("mode", fmt::format("distillation of a Wan2.2-Fun-5B-Control model ({}) is for few-step "
                                             "students ({} K) only yet: its start frame is held as TI2V's",
                                             source, setting_reference("distill_steps")));
    // An image student's frames reach a video teacher as stills (wan/objective/teacher.hpp).
    auto seen = config;
    if (in.model_config && in.model_config->patch_size[0] == 1) seen.patch_size[0] = 1;
    if (in.dataset) check_data_fits_model(*in.dataset, seen, source);
    if (run.few_step && in.model_config && to_json(config) != to_json(*in.model_config))
      throw SettingError("distill_steps", fmt::format("a few-step student has its teacher's architecture, but {} "
                                                      "differs from {}; give the teacher's config",
                                                      model_config, source));
    // Released weights were guided against the release's negative prompt,
    // which this objective does not encode: said, not silently different.
    if (const auto release = release_sampling(config, /*two_experts=*/false, 832 * 480);
        release && run.few_step && world.is_root())
      report_warning(
          "{}: the teacher has {}'s architecture; the student learns its guidance against the all-zero context "
          "(what {} trains), not the release's negative prompt",
          setting_reference("distill_steps"), release->model, setting_reference("text_drop"));
    if (in.model_config && run.student_init == StudentInit::Projection && run.init.empty() && !run.few_step)
      check_projectable(config, setting_reference("teacher") + " " + distill.teacher, *in.model_config, model_config);
    const std::string student_init = !run.init.empty() ? setting_reference("init") + " " + run.init
                                     : run.few_step    ? "the teacher's weights"
                                     : run.student_init == StudentInit::Random ? "random"
                                                                               : "projection";
    in.model_summary += fmt::format(
        "teacher: {}: {} parameters, dim {}, {} layers, held in {}; student init: {}{}\n", distill.teacher,
        parameter_count(config), config.dim, config.num_layers,
        distill.teacher_dtype == at::kBFloat16 ? "bf16" : "fp32", student_init,
        settings.resume.empty() ? "" : fmt::format(" (when {} finds no checkpoint)", setting_reference("resume")));
  });
}

// Each rank's device as it really is: the CUDA ordinal it took and its PCI
// bus id (one GPU per task shows every rank on its own cuda:0).
std::string world_table(const distributed::World& world, const distributed::Comm& comm,
                        const distributed::BackendChoice& choice, int threads) {
  const auto peers = world.peers();
  std::string out =
      fmt::format("world: {} rank{}, backend {}\n", world.size(), world.size() == 1 ? "" : "s", comm.backend());
  std::vector<std::string> devices;
  size_t width = 8;  // "cuda:0 (PCI 0000:3b:00.0)" on GPUs, "cpu" here
  for (const auto& p : peers) {
    devices.push_back(comm.device().is_cuda() ? choice.placement.ranks.at(size_t(p.rank)).describe()
                                              : std::string("cpu"));
    width = std::max(width, devices.back().size());
  }
  out +=
      fmt::format("  {:>5}  {:<24}  {:>10}  {:<{}}  {:>7}\n", "rank", "host", "local rank", "device", width, "threads");
  for (const auto& p : peers)
    out += fmt::format("  {:>5}  {:<24}  {:>10}  {:<{}}  {:>7}\n", p.rank, p.host,
                       fmt::format("{}/{}", p.local_rank, p.local_size), devices[size_t(p.rank)], width,
                       threads_per_rank(threads, p.local_size));
  return out;
}

// The job's communicator, and the line of the world table. Computing on the
// CPU of a GPU node is never silent: one warning, or with require_gpu the
// run's one error line.
std::unique_ptr<distributed::Comm> make_job_comm(const distributed::World& world, const TrainSettings& settings,
                                                 std::string& world_lines) {
  distributed::CommOptions comm_options;
  comm_options.timeout = settings.comm_timeout;
  const auto choice = distributed::choose_backend(world, settings.backend);
  const std::string on_cpu = distributed::cpu_on_gpu_nodes(world, choice, distributed::nvidia_gpus_on_node());
  world.agree([&] {
    if (settings.require_gpu && choice.backend != distributed::Backend::Nccl)
      throw SettingError("require_gpu",
                         on_cpu.empty() ? std::string("no rank of this job sees an NVIDIA GPU") : on_cpu);
  });
  if (!on_cpu.empty() && world.is_root()) report_warning("{}", on_cpu);
  std::unique_ptr<distributed::Comm> comm;
  world.agree([&] { comm = distributed::make_comm(world, choice, comm_options); });
  world_lines = world_table(world, *comm, choice, settings.threads);
  return comm;
}

// The run plan, computed once (what the banner prints and everything below
// uses), after the checks that tie the settings to this run's device.
train::RunPlan plan_job(const distributed::World& world, const TrainSettings& settings, const distributed::Comm& comm,
                        const JobInputs& in) {
  world.agree([&] {
    // A memory plan for another device than this run's is for planning only.
    const bool visible_gpu = comm.device().is_cuda();
    const auto device = settings.plan.device;
    if (device != PlanDevice::Auto && (device == PlanDevice::Cuda) != visible_gpu && !settings.dry_run)
      throw SettingError("plan_device", fmt::format("{} is not this run's device ({}): only with {}",
                                                    device == PlanDevice::Cuda ? "cuda" : "cpu", comm.device().str(),
                                                    setting_reference("dry_run")));
    if (settings.plan.gpu_memory_gib > 0 && device == PlanDevice::Auto && !visible_gpu)
      throw SettingError("gpu_memory", fmt::format("the plan is for the CPU, this run's device: add {} cuda to plan "
                                                   "for GPUs",
                                                   setting_reference("plan_device")));
  });
  train::RunPlan plan;
  world.agree([&] {
    if (settings.run.compute_dtype == at::kHalf && !comm.device().is_cuda())
      throw SettingError("precision", "fp16 needs CUDA devices (dynamic loss scaling); on CPU use bf16");
    plan = train::plan_run(settings.run, world.size(), world.rank(),
                           in.dataset ? in.dataset->layout() : data::DataLayout{});
  });
  // What a training run lacks is its one line, before the configuration table.
  world.agree([&] {
    if (settings.dry_run) return;
    const auto or_dry_run = " (or " + setting_reference("dry_run") + ")";
    if (!in.dataset) throw SettingError("data", "a training dataset is needed" + or_dry_run);
    if (!in.model_config) throw SettingError("model_config", "a model config is needed" + or_dry_run);
    if (plan.total_steps <= 0)
      throw SettingError(
          "steps", fmt::format("give {} N or {} N to train", setting_reference("steps"), setting_reference("epochs")));
  });
  return plan;
}

// The banner's lines about the rank groups: this expert group's, and the sample ranks'.
std::string group_lines(const distributed::World& world, const TrainSettings& settings, const ExpertRun* experts,
                        const JobInputs& in, const PromptVideoMemory& prompt_memory) {
  std::string lines;
  if (experts) {
    const auto& g = experts->group;
    const auto& init = settings.model_run.init;
    lines = fmt::format("expert group: {}, job ranks {}-{}, sigma' in [{:g}, {:g}], its run in {}, starting from {}\n",
                        g.name, g.first_rank, g.first_rank + g.ranks - 1, g.sigma_lo, g.sigma_hi,
                        settings.fit.output_dir, init.empty() ? "random weights" : init);
  }
  if (settings.sample_ranks > 0) {
    lines +=
        fmt::format("sample ranks: job ranks {}-{} draw the samples ({} {}); {} train{}{}\n",
                    world.job_size() - settings.sample_ranks, world.job_size() - 1, setting_reference("sample_ranks"),
                    settings.sample_ranks, experts ? "the expert groups" : "the others",
                    experts ? "" : fmt::format(" (ranks 0-{})", world.size() - 1),
                    sample_rank_memory(settings, in.model_config, in.data(), experts ? 2 : 1, prompt_memory));
  }
  return lines;
}

// The banner: the options, the groups, the world, the data, the model, the
// plan and the memory plan, with a warning per bucket that never trains
// and per memory limit exceeded. Returns the prompt file's lines (each bad
// one its line, before anything is trained).
std::vector<SamplePrompt> print_banner(distributed::World& world, const TrainSettings& settings,
                                       const TrainJobTool& tool, const ExpertRun* experts, const JobInputs& in,
                                       const distributed::Comm& comm, const std::string& world_lines,
                                       const train::RunPlan& plan) {
  const std::string data_summary =
      in.dataset ? fmt::format("data: {} ({} shards, {} samples), latents {}, text_emb {}\n{}", settings.data,
                               in.dataset->shards().size(), in.dataset->size(), in.dataset->describe_buckets(),
                               in.dataset->buckets().front().shape.text_string(), plan.describe_epoch())
                 : fmt::format("data: none given ({})\n", setting_reference("data"));
  std::vector<SamplePrompt> prompts;
  world.agree([&] {
    if (!settings.prompt_videos.prompts_file.empty())
      prompts = read_sample_prompts(settings.prompt_videos.prompts_file);
  });
  PromptVideoMemory prompt_memory;
  world.agree([&] { prompt_memory = prompt_video_memory(settings, prompts, in.data()); });
  // With sample ranks the encoders are theirs, not the training ranks'.
  const MemorySummary memory = memory_summary(world, comm, settings, in.model_config, in.teacher_config, in.data(),
                                              settings.sample_ranks > 0 ? PromptVideoMemory{} : prompt_memory);
  const std::string groups = group_lines(world, settings, experts, in, prompt_memory);
  auto print = [&] {
    if (!world.is_root()) return;
    report_info("{}{}{}{}{}{}{}", tool.resolved_options, groups, world_lines, data_summary, in.model_summary,
                plan.describe(), memory.table);
    for (const auto& b : plan.untrained_buckets())
      report_warning(
          "bucket {}: its {} samples are fewer than one global batch of {}, so no step trains on them; "
          "use a smaller batch, fewer ranks or {}",
          b.name, b.samples, plan.global_batch(), setting_reference("no_drop_last"));
    for (const auto& warning : memory.warnings) report_warning("{}", warning);
  };
  if (!experts) {
    print();
  } else {  // the groups' banners one after the other: two at once tear each other's lines in a log file
    for (const auto& in_turn : experts->layout.groups) {
      if (in_turn.first_rank == experts->group.first_rank) print();
      experts->job.barrier();
    }
  }
  return prompts;
}

// The run built from the plan (its model from its ModelRecipe) and fitted.
int build_and_fit(distributed::World& world, const TrainSettings& settings, const TrainJobTool& tool,
                  train::SampleSender* sample_sender, JobInputs& in, distributed::Comm& comm,
                  const train::RunPlan& plan, std::vector<SamplePrompt> prompts) {
  // Checked against the model and the VAE; each rank's prompts encoded by
  // umT5 once, here (the encoder freed before training starts).
  const size_t prompt_count = prompts.size();
  std::unique_ptr<PromptVideos> prompt_videos;
  world.agree([&] {
    if (prompts.empty() || settings.sample_ranks > 0) return;  // the sample ranks encode them
    const auto& shape = in.dataset->shape_of(settings.sample_index < in.dataset->size() ? settings.sample_index : 0);
    auto options = settings.prompt_videos;
    options.prompts = std::move(prompts);
    options.latents = {shape.frames, shape.height, shape.width};
    options.compute_dtype = plan.engine.compute_dtype;
    options.rank = world.rank();
    options.ranks = world.size();
    prompt_videos = std::make_unique<PromptVideos>(*in.model_config, options, comm.device());
  });
  if (prompt_videos && world.is_root())
    report_info("sample prompts: {} prompts of {}, spread over {} rank{}; umT5 freed", prompt_count,
                settings.prompt_videos.prompts_file, world.size(), world.size() == 1 ? "" : "s");

  train::FitOptions fit_options = settings.fit;
  fit_options.identity = tool.identity(world, comm);
  fit_options.model_config = to_json(*in.model_config);
  train::StartPoint start = train::start_run(world, fit_options, settings.resume,
                                             setting_reference("model_config") + " " + settings.model_config);

  std::unique_ptr<train::Validator> validator;
  world.agree([&] {
    if (!settings.val_data.empty())
      validator = std::make_unique<train::Validator>(
          std::make_unique<train::ShardSamples>(data::Dataset::open(settings.val_data)), settings.run.micro_batch);
  });
  // Every rank loads the frozen teacher (from the shared file system, as the
  // data), on the CPU in its precision, in an agreement of its own: a rank
  // that cannot read it must not leave the others in the Engine's broadcast.
  std::unique_ptr<Teacher> teacher;
  world.agree([&] {
    if (!in.teacher_config) return;
    const auto& distill = *settings.distill;
    teacher = std::make_unique<Teacher>(distill.teacher, *in.teacher_config,
                                        distill.teacher_config.empty()
                                            ? "stored in the checkpoint"
                                            : setting_reference("teacher_config") + " " + distill.teacher_config,
                                        distill.teacher_dtype);
  });
  std::unique_ptr<WanRun> run;
  world.agree([&] {
    auto run_options = settings.model_run;
    if (settings.sample_ranks > 0) run_options.sample.reset();  // the sample ranks draw
    run = std::make_unique<WanRun>(plan, run_options, comm, std::move(*in.dataset), *in.model_config, start,
                                   teacher.get());
  });
  if (settings.sample_ranks > 0) run->hand_samples_to(sample_sender);
  if (prompt_videos)
    run->set_prompt_videos([&](WanModelImpl& model, int64_t step) { return prompt_videos->draw(model, step); });
  run->connect(comm, start);
  start.checkpoint.reset();  // its state lives in the run now
  const int status = train::fit(world, comm, plan, run->fit_run(validator.get()), fit_options, start.best_val_loss);
  test_delay("after_fit");
  return status;
}

// One training run on `world` (the job, or an expert's rank group: `experts`).
int train(distributed::World& world, const TrainSettings& settings, const TrainJobTool& tool, const ExpertRun* experts,
          train::SampleSender* sample_sender) {
  // The data are checked on every rank before anything else starts; a bad
  // dataset is one line and status 2 for the whole job. Node-local copies
  // of part of a dataset are allowed with shard affinity.
  JobInputs in;
  if (!settings.data.empty()) in.dataset = train::open_job_dataset(world, settings.data, settings.run.shard_affinity);
  check_model(world, settings, in);
  check_teacher(world, settings, in);
  torch::set_num_threads(threads_per_rank(settings.threads, world.local_size()));
  std::string world_lines;
  const auto comm = make_job_comm(world, settings, world_lines);
  const train::RunPlan plan = plan_job(world, settings, *comm, in);
  auto prompts = print_banner(world, settings, tool, experts, in, *comm, world_lines, plan);
  comm->barrier();  // the collectives work end to end
  if (settings.dry_run) return kExitOk;
  return build_and_fit(world, settings, tool, sample_sender, in, *comm, plan, std::move(prompts));
}

// A training group's rank 0, however it ended: the sample ranks draw what
// they were sent and finish, or the job ends after the checkpoint timeout.
void end_hand_offs(train::SampleSender& sender, int status, const TrainSettings& settings, const SampleRanks& samples) {
  const auto bound = settings.fit.checkpoint_timeout;
  if (sender.finish(status, bound)) return;
  distributed::abort_job(
      fmt::format("the sample ranks ({}-{}) have not finished their last sample {:g} s after training ended with "
                  "status {} ({}): ending the job",
                  samples.first_rank, samples.first_rank + samples.ranks - 1,
                  std::chrono::duration<double>(bound).count(), status, setting_reference("checkpoint_timeout")),
      kExitFailure);
}

// Wan2.2 A14B's two experts in one job (expert_groups.hpp): the job splits
// into two rank groups, each trains its expert as a run of its own. A group
// that fails ends the whole job with one line naming it, rather than leave
// the other training on alone for a model that lacks half its experts.
int train_experts(distributed::World& world, const TrainSettings& settings, const TrainJobTool& tool,
                  const SampleRanks* samples) {
  ExpertLayout layout;
  world.agree([&] {
    std::optional<WanConfig> model;
    if (!settings.model_config.empty()) model = load_model_config(settings.model_config);
    layout = expert_layout(settings, world.size(), model);
    record_expert_layout(layout, settings, /*write=*/world.is_root() && !settings.dry_run);
  });
  if (world.is_root()) report_info("{}", layout.describe());
  const auto& group = layout.group_of(world.rank());
  int status = kExitOk;
  const auto group_world = world.split(group.first_rank);
  set_process_group(group.name + " expert group");
  if (tool.enter_group)
    tool.enter_group(world.job_rank(), world.job_size(), group.name, group_world->rank(), group_world->size());
  std::unique_ptr<train::SampleSender> sender;  // each group's rank 0 sends its expert
  if (samples && group_world->is_root() && !settings.dry_run)
    sender = std::make_unique<train::SampleSender>(samples->channel, samples->first_rank);
  try {
    const ExpertRun experts{world, layout, group};
    status = train(*group_world, expert_run_settings(settings, group), tool, &experts, sender.get());
  } catch (const distributed::CollectiveExit& exit) {
    status = exit.code;
  }
  if (sender) end_hand_offs(*sender, status, settings, *samples);
  // A stop (75) is every group's own, at its own step: each saved its run.
  // A failure aborts while the group's communicator is still held: freeing
  // it is collective, and the other group is still training.
  if (status != kExitOk && status != kExitRequeue) {
    const auto line = fmt::format("the {} expert group (ranks {}-{}) ended with status {}: ending the whole job",
                                  group.name, group.first_rank, group.first_rank + group.ranks - 1, status);
    // The group's first rank says it once; the others follow if it cannot.
    if (world.rank() != group.first_rank) std::this_thread::sleep_for(std::chrono::seconds(5));
    distributed::abort_job(line, status);
  }
  return status;
}

// What both the sample ranks and the training ranks need, checked once for
// the job before it splits; the expert layout of the training ranks.
std::optional<ExpertLayout> check_sample_rank_job(const distributed::World& job, const TrainSettings& settings) {
  const int ranks = settings.sample_ranks, training = job.size() - ranks;
  std::optional<ExpertLayout> layout;
  job.agree([&] {
    if (training < 1)
      throw SettingError("sample_ranks",
                         fmt::format("{} of the job's {} ranks leave none to train", ranks, job.size()));
    if (settings.data.empty() && !settings.dry_run)
      throw SettingError("data", "a training dataset is needed (or " + setting_reference("dry_run") + ")");
    if (settings.model_config.empty())
      throw SettingError("model_config", "a model config is needed (the sample ranks build the model)");
    const auto config = load_model_config(settings.model_config);
    if (ranks > 1 && config.num_heads % ranks != 0)
      throw SettingError("sample_ranks", fmt::format("model config {}'s {} heads do not split over {} ranks (the "
                                                     "sample ranks split each video's tokens)",
                                                     settings.model_config, config.num_heads, ranks));
    if (!settings.prompt_videos.prompts_file.empty()) read_sample_prompts(settings.prompt_videos.prompts_file);
    if (settings.experts) layout = expert_layout(settings, training, config);
    const int sp = settings.run.sequence_parallel;
    if (!settings.experts && training % sp != 0)  // before the sample ranks start
      throw SettingError("sp", fmt::format("is {}: it must divide the {} training ranks (the job's {} less {} {})", sp,
                                           training, job.size(), setting_reference("sample_ranks"), ranks));
  });
  return layout;
}

// Sample ranks (sample_ranks.hpp): the job's last K ranks draw the samples,
// the others train (one run, or the expert groups). A sample group that
// fails on its own ends the whole job with one line naming it.
int train_with_sample_ranks(distributed::World& job, const TrainSettings& settings, const TrainJobTool& tool) {
  const int ranks = settings.sample_ranks, training = job.size() - ranks;
  const auto layout = check_sample_rank_job(job, settings);
  const train::SampleChannel channel(job);
  const SampleRanks samples{channel, training, ranks};
  const bool sampling = job.rank() >= training;
  const auto group = job.split(sampling ? 1 : 0);
  int status = kExitOk;
  if (sampling) {
    set_process_group("sample ranks");
    if (tool.enter_group) tool.enter_group(job.rank(), job.size(), "sample", group->rank(), group->size());
    try {
      if (!settings.dry_run) status = run_sample_ranks(*group, settings, samples, layout ? &*layout : nullptr);
    } catch (const distributed::CollectiveExit& exit) {  // their own start-up failed: the line is out
      if (group->rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(5));
      distributed::abort_job(fmt::format("the sample ranks ({}-{}) ended with status {}: ending the whole job",
                                         training, training + ranks - 1, exit.code),
                             exit.code);
    }
    return status;
  }
  if (layout) return train_experts(*group, settings, tool, &samples);
  std::unique_ptr<train::SampleSender> sender;
  if (group->is_root() && !settings.dry_run) sender = std::make_unique<train::SampleSender>(channel, training);
  try {
    status = train(*group, settings, tool, nullptr, sender.get());
  } catch (const distributed::CollectiveExit& exit) {
    status = exit.code;
  }
  if (sender) end_hand_offs(*sender, status, settings, samples);
  return status;
}

}  // namespace

int run_training_job(distributed::World& world, const TrainSettings& settings, const TrainJobTool& tool) {
  world.set_timeout(settings.comm_timeout);  // bounds every start-up agreement, too
  world.agree([&] { check_run_options(settings.model_run, settings.distill.has_value()); });
  if (settings.sample_ranks > 0) return train_with_sample_ranks(world, settings, tool);
  if (settings.experts) return train_experts(world, settings, tool, nullptr);
  return train(world, settings, tool, nullptr, nullptr);
}

}  // namespace wt::wan
