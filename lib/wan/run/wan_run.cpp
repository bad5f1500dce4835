#include "wantrain/wan/run/wan_run.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/nn/block_swap.hpp"
#include "wantrain/wan/plan/memory_plan.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/wan/model/checkpoint_weights.hpp"
#include "wantrain/wan/model/projection.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/run/sampling_weights.hpp"
#include "wantrain/wan/sample/student_sampler.hpp"
#include "wantrain/wan/objective/distillation_objective.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/train/run_plan.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/wan/objective/teacher.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

namespace wt::wan {
namespace {

// The trained (requires_grad) or the frozen parameters of `model` to
// `device`, the others left where they are.
void move_parameters(WanModelImpl& model, const at::Device& device, bool trained) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters(/*recurse=*/true))
    if (p.requires_grad() == trained && p.device() != device) p.set_data(p.to(device));
}

}  // namespace

struct WanRun::Impl {
  // Sequence parallelism's group of this rank (before the model, which uses it).
  std::unique_ptr<distributed::Comm> sequence_group;
  WanModel model;
  WanModel fake_score{nullptr};  // distribution matching's, beside a few-step student
  bool fake_score_lora = false;  // --fake-score-lora-rank: its base frozen, the teacher's tensors
  WanConfig config;
  std::unique_ptr<train::Objective> objective;
  std::unique_ptr<train::Engine> engine;
  std::unique_ptr<train::ShardBatches> batches;
  Teacher* teacher = nullptr;
  int64_t first_epoch = 0;
  bool resumed = false;
  // Kept from construction for connect().
  std::unique_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<data::Dataset> dataset;
  int prefetch = 2;
  train::EngineOptions engine_options;
  LoraOptions lora;
  bool vace_branch_only = false;
  std::string frozen_base;                            // LoRA's or the VACE branch's base: its checksum
  std::unique_ptr<TrainingSampler> training_sampler;  // with options.sample
  WanRun::DrawVideos draw_videos;                     // with --sample-prompts
  bool hand_off = false;                              // with sample ranks
  train::SampleSender* sample_sender = nullptr;       // theirs, on rank 0
  int rank = 0;
  std::unique_ptr<nn::BlockSwap> block_swap;  // with options.blocks_to_swap; the model's parameter units

  Impl(WanConfig c, WanModel built) : model(std::move(built)), config(std::move(c)) {}
};

void check_run_options(const WanRunOptions& options, bool distill) {
  const bool lora = options.lora.rank > 0;
  if (lora && distill && !options.few_step)
    throw SettingError("lora_rank", fmt::format("with {} distill only for a few-step student ({} K): a smaller "
                                                "student trains in full",
                                                setting_reference("mode"), setting_reference("distill_steps")));
  if (!lora && (options.lora.alpha != 0 || options.lora.dropout != 0 || !options.lora.targets.empty() ||
                options.base_dtype != at::kFloat))
    throw SettingError("lora_rank", fmt::format("{}, {}, {} and {} need {} R", setting_reference("lora_alpha"),
                                                setting_reference("lora_dropout"), setting_reference("lora_targets"),
                                                setting_reference("base_precision"), setting_reference("lora_rank")));
  if (options.activation_offload && options.grad_checkpoint == 0)
    throw SettingError("activation_offload",
                       fmt::format("offloads the inputs that checkpointed blocks keep: it needs {} blocks or every-N",
                                   setting_reference("grad_checkpoint")));
  if (options.blocks_to_swap != 0 && !lora && !options.vace_branch_only)
    throw SettingError("blocks_to_swap",
                       fmt::format("swaps a frozen base's blocks: it needs {} R (a LoRA run) or {} vace (a VACE "
                                   "model's branch trained alone)",
                                   setting_reference("lora_rank"), setting_reference("trainable")));
}

WanRun::WanRun(const train::RunPlan& plan, const WanRunOptions& options, distributed::Comm& comm, data::Dataset dataset,
               WanConfig config, const train::StartPoint& start, Teacher* teacher) {
  const ckpt::Checkpoint* resume = start.checkpoint ? &*start.checkpoint : nullptr;
  data::DistributedSampler sampler(dataset.layout(), plan.sampler);

  const bool lora = options.lora.rank > 0;
  const bool few_step = teacher && options.few_step;
  // A VACE model's blocks are swapped after the base's, in a LoRA run (where they are frozen).
  const int64_t vace_swappable = lora ? int64_t(config.vace_layers.size()) : 0;
  if (options.blocks_to_swap < 0 || options.blocks_to_swap > config.num_layers + vace_swappable)
    throw SettingError(
        "blocks_to_swap",
        fmt::format("{}: the model has {} blocks{} (0 to {} may be swapped)", options.blocks_to_swap, config.num_layers,
                    vace_swappable > 0 ? fmt::format(" and {} VACE blocks, swapped after them", vace_swappable)
                    : config.vace()    ? std::string(", and its VACE blocks are trained")
                                       : std::string(),
                    config.num_layers + vace_swappable));
  // The model of its recipe (the sample ranks build theirs from the same
  // one). A resumed full run's checkpoint holds every trained tensor: a
  // checkpoint's or the teacher's weights are not read before it; a LoRA
  // resume holds only the adapters (a VACE branch's, only the branch), so
  // its base is read then too.
  auto recipe = model_recipe(options, config, plan.settings.seed, few_step ? teacher->path() : std::string());
  const bool from_teacher = few_step && options.init.empty();
  const bool frozen_base = lora || options.vace_branch_only;
  if (resume && !frozen_base && recipe.weights && (from_teacher || ckpt::is_checkpoint_file(recipe.weights->path)))
    recipe.weights.reset();
  BuildOptions build;
  TensorSource teacher_weights;  // as the teacher loaded them, or its file when they are held rounded to bf16
  if (from_teacher && recipe.weights) {
    teacher_weights = teacher->unrounded_weights();
    build.opened = &teacher_weights;
  }
  auto built = build_model(recipe, build);
  if (comm.rank() == 0 && recipe.weights && !options.init.empty())
    report_info("init: {}: {}", options.init, built.loaded);
  impl_ = std::make_unique<Impl>(std::move(config), built.model);
  auto& im = *impl_;
  im.teacher = teacher;
  im.rank = comm.rank();
  // Every rank reads the sample (a few MB at most): a bad --sample-index is
  // the same error everywhere.
  if (options.sample) {
    auto sample = *options.sample;
    sample.compute_dtype = plan.engine.compute_dtype;  // sampled as trained
    im.training_sampler = std::make_unique<TrainingSampler>(dataset, sample);
  }
  auto& model = im.model;
  if (from_teacher && comm.rank() == 0 && !resume)
    report_info("student init: the teacher's weights ({}){}", teacher->path(), lora ? ", frozen as the LoRA base" : "");
  auto objective_options = options.objective;
  if (lora) {
    im.lora = options.lora;
    im.frozen_base = built.base_checksum;
    objective_options.lora = describe_lora(options.lora);
    objective_options.lora_base = im.frozen_base;
    objective_options.lora_base_precision = train::precision_name(options.base_dtype);
    if (comm.rank() == 0)
      report_info("lora: {}; {} adapter parameters trained, the base's {} frozen ({}, {}; block Linears held in {})",
                  objective_options.lora, built.adapter_parameters, parameter_count(im.config),
                  !options.init.empty() ? options.init
                  : few_step            ? "the teacher " + teacher->path()
                                        : std::string("from the seed"),
                  im.frozen_base, objective_options.lora_base_precision);
  }
  if (options.vace_branch_only) {
    im.vace_branch_only = true;
    im.frozen_base = built.base_checksum;
    objective_options.vace_base = im.frozen_base;
    if (comm.rank() == 0)
      report_info("trainable: the VACE branch, {} parameters trained in full; the base's {} frozen ({}, {})",
                  vace_branch_parameter_count(im.config),
                  parameter_count(im.config) - vace_branch_parameter_count(im.config),
                  options.init.empty() ? std::string("from the seed") : options.init, im.frozen_base);
  }
  // Before the model goes to the device: the swapped weights never do, whole.
  if (options.blocks_to_swap > 0) {
    im.block_swap =
        std::make_unique<nn::BlockSwap>(*model, std::min(options.blocks_to_swap, im.config.num_layers), comm.device(),
                                        std::max<int64_t>(0, options.blocks_to_swap - im.config.num_layers));
    model->set_parameter_units(im.block_swap.get());
    if (comm.rank() == 0)
      report_info(
          "block swap: the frozen weights of blocks 0 to {}{} ({}) in host memory{}, each brought to the "
          "{} around its use",
          im.block_swap->count() - 1,
          im.block_swap->side_count() > 0 ? fmt::format(" and VACE blocks 0 to {}", im.block_swap->side_count() - 1)
                                          : std::string(),
          format_bytes(im.block_swap->host_bytes()), comm.device().is_cuda() ? " (page-locked)" : "",
          comm.device().is_cuda() ? "GPU" : "device");
  }
  model->to(comm.device());
  model->train();
  model->set_grad_checkpoint(options.grad_checkpoint);
  model->set_activation_offload(options.activation_offload);
  if (teacher) teacher->set_attention_chunk(options.attention_chunk);
  // Groups of consecutive ranks share each sample's tokens (a teacher runs
  // whole sequences on every rank).
  if (const int sp = plan.settings.sequence_parallel; sp > 1) {
    im.sequence_group = comm.split(comm.rank() / sp);
    model->set_sequence_parallel(im.sequence_group.get());
  }
  // Distribution matching's fake score starts as the teacher too, trained
  // in full whatever the student (DMD2 initialises it so): it must first
  // describe the student's samples, which are the teacher's.
  const bool matching = few_step && options.few_step->method == FewStepMethod::DistributionMatching;
  if (matching) {
    ModelRecipe fake_score;
    fake_score.config = im.config;
    fake_score.first = FirstWeights::Generator;  // drawn, then read over: as since its first release
    fake_score.weights = ModelWeights{teacher->path(), /*prefer_ema=*/true};
    fake_score.attention_chunk = options.attention_chunk;
    // --fake-score-lora-rank: adapters on a frozen base in the teacher's
    // precision, which then holds the teacher's own tensors (connect).
    const int fake_rank = options.few_step->fake_score_lora_rank;
    if (fake_rank > 0) {
      fake_score.linear_dtype = teacher->held_in_bf16() ? at::kBFloat16 : at::kFloat;
      fake_score.adapters = LoraOptions{fake_rank, 0.0, 0.0, {}, false};
    }
    const auto fake_score_weights = teacher->unrounded_weights();
    const auto built_fake = build_model(fake_score, {&fake_score_weights, {}});
    im.fake_score = built_fake.model;
    im.fake_score_lora = fake_rank > 0;
    // A LoRA fake score's frozen base stays on the host until connect()
    // lends it the teacher's tensors: never a second teacher on the device.
    if (im.fake_score_lora)
      move_parameters(*im.fake_score, comm.device(), /*trained=*/true);
    else
      im.fake_score->to(comm.device());
    im.fake_score->train();
    im.fake_score->set_grad_checkpoint(options.grad_checkpoint);
    // Under --sp its tokens split over the group as the student's do: each
    // rank's forward gives the whole output, so the matching loss (and its
    // per-sample normaliser) is the whole sample's, and each rank's
    // gradient is its tokens' part.
    im.fake_score->set_sequence_parallel(im.sequence_group.get());
    if (comm.rank() == 0 && !resume) {
      if (fake_rank > 0)
        report_info(
            "fake score: rank-{} LoRA on the teacher's frozen weights ({}), {} adapter parameters trained "
            "beside the student",
            fake_rank, teacher->path(), built_fake.adapter_parameters);
      else
        report_info("fake score: the teacher's weights ({}), {} parameters trained in full beside the student",
                    teacher->path(), parameter_count(im.config));
    }
  }
  if (few_step) {
    auto few_step_options = *options.few_step;
    few_step_options.same_calls_on_every_rank = plan.engine.zero == 3;
    im.objective =
        std::make_unique<FewStepObjective>(*model, *teacher, objective_options, few_step_options,
                                           plan.engine.compute_dtype, matching ? im.fake_score.get() : nullptr);
  } else if (teacher)
    im.objective = std::make_unique<DistillationObjective>(*model, *teacher, objective_options,
                                                           options.distill_target_weight, plan.engine.compute_dtype);
  else
    im.objective = std::make_unique<FlowMatchingObjective>(*model, objective_options);
  // The trained parameters by official name: what checkpoints and projection fill.
  const auto& named = im.objective->trainable();
  if (resume) {
    refuse_ungrouped_distribution_matching(start.path, resume->groups_recorded);
    im.objective->check_resume(resume->objective_kind, resume->objective, start.path);
    // With ZeRO the optimizer state and EMA are read (and checked) slice by slice in Engine::load_state.
    const bool whole_ema = plan.engine.ema_decay > 0 && plan.engine.zero == 0;
    ckpt::check_fits(*resume, start.path, named,
                     whole_ema ? train::averaged_tensors(im.objective->groups()) : train::NamedTensors{});
    ckpt::copy_named(resume->model, named);
  }
  if (teacher) {
    if (teacher->config().patch_size[0] > 1 && im.config.patch_size[0] == 1) teacher->show_frames_as_stills(true);
    if (!resume && !few_step) start_student(*teacher, options, comm.rank(), plan.settings.seed);
  }

  if (resume) {
    train::restore_sampler(*resume, start.path, sampler);
    im.first_epoch = resume->state.epoch;
  }
  im.sampler = std::make_unique<data::DistributedSampler>(std::move(sampler));
  im.dataset = std::make_unique<data::Dataset>(std::move(dataset));
  im.prefetch = options.prefetch;
  im.engine_options = plan.engine;
}

void WanRun::connect(distributed::Comm& comm, const train::StartPoint& start) {
  auto& im = *impl_;
  im.engine = std::make_unique<train::Engine>(comm, *im.objective, im.engine_options);
  // ZeRO-3's units gathered unit by unit, or the swapped blocks (LoRA, never with ZeRO-3).
  if (im.block_swap) {
    im.model->set_parameter_units(im.block_swap.get());
    im.engine->watch_units(im.block_swap.get());
  } else {
    im.model->set_parameter_units(im.engine->parameter_units());
  }
  // The fake score is the objective's second group (ZeRO-3 shards it by its own units).
  if (im.fake_score) im.fake_score->set_parameter_units(im.engine->parameter_units(/*group=*/1));
  if (Teacher* teacher = im.teacher) {
    // A LoRA student's base is its teacher's weights (the model is on the
    // device already): held once, the teacher's tensors being the base's;
    // not with swapped blocks, whose weights come and go.
    std::string shared;
    if (im.lora.rank > 0 && !im.block_swap) {
      const auto sharing = teacher->share_frozen_weights(*im.model);
      shared = fmt::format("; {} of its {} tensors ({}) are the LoRA base's, held once", sharing.tensors, sharing.of,
                           format_bytes(sharing.bytes));
    }
    teacher->to(comm.device());  // already in its final precision; what is shared is there
    // A LoRA fake score's frozen base is the teacher's tensors (and with a
    // LoRA student, its base's): held once.
    if (im.fake_score_lora) {
      const auto lent = teacher->lend_frozen_weights(*im.fake_score);
      move_parameters(*im.fake_score, comm.device(), /*trained=*/false);  // what was not lent
      shared += fmt::format("; {} of the LoRA fake score's {} tensors ({}) are its, held once", lent.tensors, lent.of,
                            format_bytes(lent.bytes));
    }
    if (comm.rank() == 0)
      report_info("teacher: {} ({}), checksum {}, frozen{}{}{}", teacher->path(), teacher->source(),
                  teacher->checksum(), teacher->held_in_bf16() ? ", Linear weights held in bf16" : "",
                  teacher->shows_frames_as_stills() ? ", each frame shown to it as a still video" : "", shared);
  }
  if (start.checkpoint) {
    im.engine->load_state(*start.checkpoint, start.path);
    im.resumed = true;
  }
  train::ShardBatchesOptions batches;
  batches.prefetch = im.prefetch;
  batches.for_gpu = comm.device().is_cuda();
  batches.objective = im.objective.get();  // the noise is drawn on the loader's thread
  batches.first_step = im.engine->steps_taken();
  im.batches = std::make_unique<train::ShardBatches>(std::move(*im.dataset), std::move(*im.sampler), batches);
}

WanRun::~WanRun() = default;

train::Engine& WanRun::engine() { return *impl_->engine; }

train::FitRun WanRun::fit_run(train::Validator* validator) {
  train::FitRun run;
  run.engine = impl_->engine.get();
  run.batches = impl_->batches.get();
  run.validator = validator;
  run.first_epoch = impl_->first_epoch;
  run.resumed = impl_->resumed;
  run.save_weights = [this](const std::string& directory, bool write) { return save_weights(directory, write); };
  if (impl_->hand_off) {  // the model's groups: the student, never the fake score
    run.hand_off = train::FitRun::SampleHandOff{impl_->sample_sender, impl_->frozen_base};
    return run;
  }
  if (impl_->training_sampler) run.draw_sample = [this](int64_t step) { return draw_sample(step); };
  if (impl_->draw_videos) run.draw_videos = [this](int64_t step) { return draw_videos(step); };
  return run;
}

void WanRun::start_student(const Teacher& teacher, const WanRunOptions& options, int rank, uint64_t seed) {
  auto& im = *impl_;
  const bool report = rank == 0;
  if (!options.init.empty()) {
    if (report) report_info("student init: the weights of {} (not projected)", options.init);
    return;
  }
  if (options.student_init == StudentInit::Random) {
    if (report) report_info("student init: random (seed {})", seed);
    return;
  }
  // Rank 0's student is the one the Engine broadcasts: only it reads the
  // teacher, from its tensors as loaded, or from its file when they are held
  // rounded to bf16.
  if (!report) return;
  const auto projection =
      project_weights(teacher.unrounded_weights(), teacher.config(), im.objective->trainable(), im.config);
  report_info("student init: projection from the teacher {}\n{}", teacher.path(), projection.describe());
}

std::optional<train::SampleReport> WanRun::draw_sample(int64_t step) const {
  auto& im = *impl_;  // the model is drawn with (and left as it was)
  // With ZeRO-3 every rank gathers the whole model, so that rank 0 can
  // sample by itself: from the EMA's slices, which it then holds.
  const bool sharded = im.engine_options.zero == 3;
  const auto ema = sharded ? train::NamedTensors{} : im.engine->ema_weights(/*rank=*/0);
  const train::WholeWeights whole(*im.engine, /*ema=*/true);
  if (im.rank != 0) return std::nullopt;
  WholeSequences alone(*im.model);  // rank 0 samples by itself
  return im.training_sampler->draw(*im.model, im.objective->groups().front().parameters, ema, step);
}

void WanRun::set_prompt_videos(DrawVideos draw) { impl_->draw_videos = std::move(draw); }

void WanRun::hand_samples_to(train::SampleSender* sender) {
  impl_->hand_off = true;
  impl_->sample_sender = sender;
}

std::vector<train::SampleVideo> WanRun::draw_videos(int64_t step) const {
  auto& im = *impl_;
  // Every rank draws, so every rank holds the whole EMA: gathered from its
  // slices into the model with ZeRO-3, else by name.
  const bool sharded = im.engine_options.zero == 3;
  const auto ema = sharded ? train::NamedTensors{} : im.engine->ema_weights();
  const train::WholeWeights whole(*im.engine, /*ema=*/true);
  WholeSequences alone(*im.model);
  torch::NoGradGuard no_grad;
  const SwappedWeights swapped(im.objective->groups().front().parameters, ema);
  const EvalMode eval(*im.model);
  return im.draw_videos(*im.model, step);
}

std::string WanRun::save_weights(const std::string& directory, bool write) const {
  // Collective; only rank 0 (the one that writes) keeps them.
  // The model's groups (the student's; a fake score is training state).
  const auto ema_weights = impl_->engine->ema_weights(/*rank=*/0);
  const auto weights = impl_->engine->weights(/*rank=*/0);
  if (!write) return {};
  const auto* ema = ema_weights.empty() ? nullptr : &ema_weights;
  std::filesystem::create_directories(directory);
  // A few-step student's sampler travels in its files (sample/student_sampler.hpp).
  auto metadata = student_sampler_fields(impl_->objective->checkpoint_state());
  if (impl_->lora.rank > 0) {
    const auto& im = *impl_;
    write_lora_file(directory + "/lora.safetensors", weights, im.lora, im.frozen_base, LoraNames::Official, at::kFloat,
                    metadata);
    if (ema)
      write_lora_file(directory + "/lora-ema.safetensors", *ema, im.lora, im.frozen_base, LoraNames::Official,
                      at::kFloat, metadata);
    write_file_durably(directory + "/model-config.json", to_json(im.config) + "\n");
    return fmt::format("weights: {0}/lora.safetensors (LoRA adapters{1}), config {0}/model-config.json", directory,
                       ema ? fmt::format("; EMA: {}/lora-ema.safetensors", directory) : std::string());
  }
  metadata["format"] = "pt";
  // A VACE branch trained alone: the group is the branch, the files are the
  // whole model (the frozen base as the model holds it, its swapped blocks'
  // weights from host memory).
  const auto whole = [&](const train::NamedTensors& trained) {
    if (!impl_->vace_branch_only) return trained;
    std::map<std::string, at::Tensor> held(trained.begin(), trained.end());
    if (impl_->block_swap)
      for (const auto& [name, tensor] : impl_->block_swap->host_tensors()) held.emplace(name, tensor);
    train::NamedTensors all;
    for (const auto& item : impl_->model->named_parameters()) {
      const auto it = held.find(item.key());
      all.emplace_back(item.key(), it != held.end() ? it->second : item.value().detach());
    }
    return all;
  };
  if (impl_->engine_options.zero == 3 || impl_->vace_branch_only)  // ZeRO-3: the model holds its fp32 slices
    io::write_safetensors(directory + "/model.safetensors", whole(weights), at::kFloat, metadata);
  else  // the free function, not this member
    wan::save_weights(*impl_->model, directory + "/model.safetensors", at::kFloat, WeightNames::Official, metadata);
  if (ema) io::write_safetensors(directory + "/ema.safetensors", whole(*ema), at::kFloat, metadata);
  write_file_durably(directory + "/model-config.json", to_json(impl_->config) + "\n");
  return fmt::format("weights: {0}/model.safetensors{1}, config {0}/model-config.json", directory,
                     ema ? fmt::format(" (EMA: {}/ema.safetensors)", directory) : std::string());
}

ModelRecipe model_recipe(const WanRunOptions& options, const WanConfig& config, uint64_t seed,
                         const std::string& few_step_teacher) {
  ModelRecipe recipe;
  recipe.config = config;
  recipe.linear_dtype = options.base_dtype;
  recipe.seed = seed;  // the same initial weights for the same seed (rank 0's are broadcast)
  if (!options.init.empty())
    recipe.weights = ModelWeights{options.init, /*prefer_ema=*/false};
  else if (!few_step_teacher.empty())  // a few-step student starts as its teacher, read for its EMA as the teacher is
    recipe.weights = ModelWeights{few_step_teacher, /*prefer_ema=*/true};
  if (options.lora.rank > 0) recipe.adapters = options.lora;
  recipe.vace_branch_only = options.vace_branch_only;
  recipe.attention_chunk = options.attention_chunk;
  return recipe;
}

}  // namespace wt::wan
