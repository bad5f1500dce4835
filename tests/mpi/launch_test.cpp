// Whole jobs under mpiexec: how they end when something goes wrong, and what
// the apps print. Each test launches a job and reads its exit status and output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>
#include <filesystem>
#include <torch/torch.h>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/util/process.hpp"
#include "wantrain/data/dataset.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace {

using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::occurrences;

Job launch_mpi(const std::string& program_and_args) {
  // mpiexec PREFLAGS program POSTFLAGS args: the program is the first word.
  const auto space = program_and_args.find(' ');
  return launch(std::string(WANTRAIN_MPIEXEC) + " " + program_and_args.substr(0, space) + " " +
                WANTRAIN_MPIEXEC_POSTFLAGS + " " +
                (space == std::string::npos ? "" : program_and_args.substr(space + 1)));
}

const int kRanks = WANTRAIN_TEST_RANKS;
// Guards against a hang only; the jobs below end in a few seconds.
constexpr double kHangGuardSeconds = 60;

}  // namespace

TEST(Launch, SkippedCollectiveEndsTheJobWithTheTimeoutLine) {
  const Job job = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " skip 2");
  EXPECT_NE(job.status, 0) << job.output;
  // rank 0 waited in collective #1 (all_reduce) and reports it, naming itself.
  EXPECT_TRUE(
      std::regex_search(job.output, std::regex("\\[rank 0/" + std::to_string(kRanks) +
                                               " on [^\\]]+\\]: error: MPI all_reduce #1 \\(Float x 16, sum\\) did not "
                                               "complete within 2 s \\(the comm_timeout setting\\): no answer to "
                                               "a roll call within 0.5 s from rank " +
                                               std::to_string(kRanks - 1) + " on \\S+: it has exited")))
      << job.output;
  EXPECT_LT(job.seconds, kHangGuardSeconds);
}

// The timeout line tells a rank that is alive but late (every rank answers
// the roll call) from one that is gone: a stopped process, as on a node that
// froze or dropped off the network, is named with its host.
TEST(Launch, TheTimeoutLineNamesTheRanksThatNoLongerAnswer) {
  const Job busy = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " busy 2");
  EXPECT_NE(busy.status, 0) << busy.output;
  EXPECT_NE(busy.output.find("did not complete within 2 s (the comm_timeout setting): every rank answers a roll "
                             "call (within 0.5 s), so none has died"),
            std::string::npos)
      << busy.output;
  const Job stopped = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " stop 2");
  EXPECT_NE(stopped.status, 0) << stopped.output;
  EXPECT_TRUE(std::regex_search(stopped.output,
                                std::regex("\\[rank 0/\\d+ on [^\\]]+\\]: error: MPI all_reduce #1 \\(Float x 16, "
                                           "sum\\) did not complete within 2 s \\(the comm_timeout setting\\): no "
                                           "answer to a roll call within 0.5 s from rank " +
                                           std::to_string(kRanks - 1) + " on " + wt::host_name() +
                                           ": it has exited, been stopped, or lost its node")))
      << stopped.output;
  EXPECT_LT(stopped.seconds, kHangGuardSeconds);
}

TEST(Launch, ErrorOnOneRankEndsEveryRankWithThatRanksLine) {
  const Job job = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " throw");
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_NE(job.output.find("[rank " + std::to_string(kRanks - 1) + "/" + std::to_string(kRanks) + " on "),
            std::string::npos)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "error: injected failure on the last rank"), 1u) << job.output;
  EXPECT_LT(job.seconds, kHangGuardSeconds);
}

// The failing rank's line comes before any destructor: one that would block
// (a writer's drain, a comm's join) cannot hold the job or hide the cause.
TEST(Launch, ErrorOnOneRankIsReportedBeforeADestructorThatBlocks) {
  const Job job = launch("timeout 60 " + std::string(WANTRAIN_MPIEXEC) + " " + WANTRAIN_FAULT_JOB + " " +
                         WANTRAIN_MPIEXEC_POSTFLAGS + " throw-blocked");
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: injected failure on the last rank"), 1u) << job.output;
  EXPECT_LT(job.seconds, 30) << job.output;
}

// World's own collectives are bounded: a rank that never enters an agreement
// ends the job after the comm timeout, with a line naming the agreement.
TEST(Launch, AnAgreementOneRankNeverEntersEndsTheJobAfterTheTimeout) {
  const Job job = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " agree-skip 2");
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_TRUE(std::regex_search(job.output, std::regex("\\[rank 0/" + std::to_string(kRanks) +
                                                       " on [^\\]]+\\]: error: world agreement \\(a start-up or "
                                                       "shutdown step\\) did not complete within 2 s")))
      << job.output;
  EXPECT_LT(job.seconds, kHangGuardSeconds);
}

TEST(Launch, UnknownOptionIsOneLineAndStatus2) {
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --bogus 3");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: unrecognised option '--bogus'"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "resolved configuration"), 0u) << job.output;
}

TEST(Launch, BadValueIsOneLineNamingTheOption) {
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --grad-accum 0");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: option --grad-accum: must be at least 1"), 1u) << job.output;
}

TEST(Launch, DryRunPrintsTheConfigurationAndWorldOnceFromRankZero) {
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi --lr 3e-4 --batch-size 4");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "resolved configuration"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "world: " + std::to_string(kRanks) + " ranks, backend MPI"), 1u) << job.output;
  EXPECT_TRUE(std::regex_search(job.output, std::regex("lr +0\\.0003 +\\(command line\\)"))) << job.output;
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(
        std::regex_search(job.output, std::regex("\\[info\\] +" + std::to_string(r) + " +\\S+ +\\d+/\\d+ +cpu")))
        << "rank " << r << " missing from the world table\n"
        << job.output;
  EXPECT_NE(job.output.find("effective batch: 4 per rank x " + std::to_string(kRanks) +
                            " ranks x 1 accumulation "
                            "steps = " +
                            std::to_string(4 * kRanks)),
            std::string::npos)
      << job.output;
}

// --require-gpu: a job that would compute on the CPU is refused in one line,
// before the configuration table; without it a CPU node says nothing.
TEST(Launch, RequireGpuRefusesACpuJobInOneLine) {
  if (wt::distributed::nvidia_gpus_on_node() > 0) GTEST_SKIP() << "this node has NVIDIA GPUs";
  const Job plain = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run");
  EXPECT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(occurrences(plain.output, "NVIDIA GPU"), 0u) << plain.output;
  for (const std::string backend : {"auto", "mpi"}) {
    const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --require-gpu --backend " + backend);
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(occurrences(job.output, "error: option --require-gpu: no rank of this job sees an NVIDIA GPU"), 1u)
        << job.output;
    EXPECT_EQ(occurrences(job.output, "resolved configuration"), 0u) << job.output;
  }
}

TEST(Launch, IniConfigFileIsReadWithTheSameNames) {
  const std::string ini = ::testing::TempDir() + "launch-run.ini";
  std::ofstream(ini) << "lr = 0.125\nprecision = bf16\ndry-run = true\n";
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --config " + ini + " --precision fp32");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_TRUE(std::regex_search(job.output, std::regex("lr +0\\.125 +\\(" + ini + "\\)"))) << job.output;
  EXPECT_TRUE(std::regex_search(job.output, std::regex("precision +fp32 +\\(command line\\)"))) << job.output;
}

TEST(Launch, WithoutALauncherWantrainIsAWorldOfOne) {
  const Job job = launch(std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_NE(job.output.find("world: 1 rank, backend MPI"), std::string::npos) << job.output;
}

TEST(Launch, VersionNamesTheLibrariesBuiltWith) {
  const Job job = launch(std::string(WANTRAIN_WANTRAIN) + " --version");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_TRUE(std::regex_search(
      job.output, std::regex("^wantrain \\d+\\.\\d+\\.\\d+ \\(git ([0-9a-f]+(-dirty)?|unknown)\\)\\n  LibTorch ")))
      << job.output;
  // The malloc the apps run on (cmake/WantrainMalloc.cmake), as the process finds it.
  const std::string malloc_name = std::string(WANTRAIN_APPS_MALLOC) == "tcmalloc" ? "TCMalloc" : "glibc malloc";
  EXPECT_TRUE(std::regex_search(job.output, std::regex(", " + malloc_name + "\\n$"))) << job.output;
}

TEST(Launch, DryRunPrintsTheMemoryPlanOfTheRun) {
  const std::string configs = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/";
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi --model-config " + configs +
                             "wan-tiny.json --plan-latents 2x32x32 --grad-checkpoint blocks --attention-chunk 64 "
                             "--ema-decay 0.99");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "memory plan per rank:"), 1u) << job.output;
  // wan-tiny's patch is (1, 2, 2): 2 x 16 x 16 tokens.
  EXPECT_EQ(occurrences(job.output, "batch 1 x 512 tokens, attention chunk 64, checkpointing every block"), 1u)
      << job.output;
  const int64_t params = wt::wan::parameter_count(wt::wan::load_model_config(configs + "wan-tiny.json"));
  for (const std::string& line :
       {std::to_string(params) + " parameters, fp32", std::string("fp32, in the Reducer's buckets"),
        std::string("AdamW's two moments, fp32"), std::string("averaged weights, fp32"),
        std::string("the trained state copied for the writer thread (rank 0)"),
        std::string("activations without checkpointing\n")})
    EXPECT_EQ(occurrences(job.output, line), 1u) << line << "\n" << job.output;
  EXPECT_TRUE(
      std::regex_search(job.output, std::regex("\\[info\\]   host +[0-9.]+ GiB  this node's memory, shared by " +
                                               std::to_string(kRanks) + " ranks on it\\n")))
      << job.output;
  EXPECT_EQ(occurrences(job.output, "warning"), 0u) << job.output;

  const Job no_tokens = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi --model-config " +
                                   configs + "wan-tiny.json");
  EXPECT_EQ(no_tokens.status, 0) << no_tokens.output;
  EXPECT_EQ(occurrences(no_tokens.output, "memory plan: needs the token count: give --data, or --plan-latents FxHxW"),
            1u)
      << no_tokens.output;
}

TEST(Launch, DryRunWarnsOnceWhenThePlanExceedsTheHostMemory) {
  // Wan2.1-14B fully fine-tuned at 480p x 81 frames in fp32: hundreds of GiB, chunked attention (auto) or not.
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi --model-config " +
                             WANTRAIN_SOURCE_DIR + "/data/configs/wan2.1-t2v-14b.json --plan-latents 21x60x104");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "[warning] the memory plan needs "), 1u) << job.output;
  EXPECT_TRUE(std::regex_search(job.output, std::regex("GiB of host memory on this node \\(" + std::to_string(kRanks) +
                                                       " ranks on it\\), more than its [0-9.]+ GiB")))
      << job.output;
  EXPECT_TRUE(
      std::regex_search(job.output, std::regex("planned for +CPU  auto: this run is on the CPU \\(--plan-device "
                                               "cuda plans a job for GPUs\\)\\n")))
      << job.output;
}

// Planning a GPU job where no GPU is (a login node): --plan-device cuda puts
// the model state and activations on each GPU, of --gpu-memory GiB or an
// assumed 80, and the rest on the host; each total has its verdict.
TEST(Launch, DryRunPlansAGpuJobOnAMachineWithoutOne) {
  const std::string job_args = std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi --model-config " +
                               WANTRAIN_SOURCE_DIR +
                               "/data/configs/wan2.1-t2v-1.3b.json --plan-latents 21x60x104 --precision bf16 "
                               "--attention-chunk 256 --grad-checkpoint blocks";
  const Job gpu = launch_mpi(job_args + " --plan-device cuda");
  ASSERT_EQ(gpu.status, 0) << gpu.output;
  EXPECT_TRUE(std::regex_search(gpu.output, std::regex("planned for +GPUs  --plan-device cuda\n"))) << gpu.output;
  EXPECT_TRUE(std::regex_search(
      gpu.output, std::regex("capacity +80\\.0 GiB  each GPU: assumed, as this run has no GPU \\(--gpu-memory GiB\\)")))
      << gpu.output;
  // The GPU's total is the plan's on-device total, and fits 80 GiB.
  std::smatch total, each;
  ASSERT_TRUE(
      std::regex_search(gpu.output, total, std::regex("total +([0-9.]+ GiB)  on the GPU; [0-9.]+ \\w+ on the host")))
      << gpu.output;
  ASSERT_TRUE(std::regex_search(gpu.output, each, std::regex("on each GPU +([0-9.]+ GiB)  fits in 80\\.0 GiB")))
      << gpu.output;
  EXPECT_EQ(total[1], each[1]);
  EXPECT_TRUE(std::regex_search(gpu.output, std::regex("host per node +[0-9.]+ \\w+  its " + std::to_string(kRanks) +
                                                       " ranks together: (fits|does not fit) in this node's")))
      << gpu.output;
  // A smaller GPU: the verdict and one warning name it.
  const Job small = launch_mpi(job_args + " --plan-device cuda --gpu-memory 16");
  ASSERT_EQ(small.status, 0) << small.output;
  EXPECT_TRUE(std::regex_search(small.output, std::regex("capacity +16\\.0 GiB  each GPU: --gpu-memory\n")))
      << small.output;
  EXPECT_TRUE(std::regex_search(small.output, std::regex("on each GPU +[0-9.]+ GiB  does not fit in 16\\.0 GiB")))
      << small.output;
  EXPECT_EQ(occurrences(small.output, "on each GPU, more than its 16.0 GiB (--gpu-memory)"), 1u) << small.output;

  // Planning for another device is for dry runs; --gpu-memory is for GPU plans.
  for (const auto& [args, line] :
       {std::pair{std::string(" --plan-device cuda --gpu-memory -1"),
                  std::string("option --gpu-memory: must be 0 (the visible GPU's) or a positive number of GiB")},
        {std::string(" --gpu-memory 40"),
         std::string("option --gpu-memory: the plan is for the CPU, this run's device: add --plan-device cuda to plan "
                     "for GPUs")},
        {std::string(" --plan-device cpu --gpu-memory 40"),
         std::string("option --gpu-memory: not with --plan-device cpu (a plan for the CPU)")}}) {
    const Job bad = launch_mpi(job_args + args);
    EXPECT_EQ(bad.status, 2) << args << "\n" << bad.output;
    EXPECT_EQ(occurrences(bad.output, line), 1u) << args << "\n" << bad.output;
  }
  const Job not_dry = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --backend mpi --plan-device cuda --model-config " +
                                 WANTRAIN_SOURCE_DIR + "/data/configs/wan-tiny.json --plan-latents 2x8x8");
  EXPECT_EQ(not_dry.status, 2) << not_dry.output;
  EXPECT_EQ(
      occurrences(not_dry.output, "option --plan-device: cuda is not this run's device (cpu): only with --dry-run"), 1u)
      << not_dry.output;
}

TEST(Launch, PlanLatentsAreCheckedAndNamed) {
  const std::string tiny = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny.json";
  const Job malformed = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --plan-latents 2x32");
  EXPECT_EQ(malformed.status, 2) << malformed.output;
  EXPECT_EQ(occurrences(malformed.output,
                        "error: option --plan-latents: '2x32' is not FxHxW with positive sizes, e.g. 21x60x104"),
            1u)
      << malformed.output;
  const Job unfit =
      launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --model-config " + tiny + " --plan-latents 1x31x32");
  EXPECT_EQ(unfit.status, 2) << unfit.output;
  EXPECT_EQ(occurrences(unfit.output,
                        "error: option --plan-latents: latent height 31 is not a positive multiple of "
                        "the model's patch size 2"),
            1u)
      << unfit.output;
}

TEST(Launch, EveryToolAndSubcommandAnswersVersionWithTheVersion) {
  const std::vector<std::pair<std::string, std::string>> tools = {
      {std::string(WANTRAIN_WANTRAIN) + " export", "wantrain export"},
      {std::string(WANTRAIN_WANTRAIN) + " plot", "wantrain plot"},
      {std::string(WANTRAIN_WANTRAIN) + " report", "wantrain report"},
      {WANTRAIN_WANSAMPLE, "wansample"},
      {WANTRAIN_WANDATA, "wandata"},
      {std::string(WANTRAIN_WANDATA) + " synth", "wandata synth"},
      {std::string(WANTRAIN_WANDATA) + " verify", "wandata verify"},
      {std::string(WANTRAIN_WANDATA) + " split", "wandata split"},
      {std::string(WANTRAIN_WANDATA) + " stage", "wandata stage"},
      {WANTRAIN_WANBENCH, "wanbench"},
      {std::string(WANTRAIN_WANBENCH) + " allreduce", "wanbench allreduce"},
      {std::string(WANTRAIN_WANBENCH) + " io", "wanbench io"},
      {std::string(WANTRAIN_WANBENCH) + " model", "wanbench model"},
      {std::string(WANTRAIN_WANBENCH) + " step", "wanbench step"},
      {std::string(WANTRAIN_WANBENCH) + " ckpt", "wanbench ckpt"},
      {WANTRAIN_CSVFIT, "csvfit"}};
  for (const auto& [command, program] : tools) {
    const Job job = launch(command + " --version");
    EXPECT_EQ(job.status, 0) << command << "\n" << job.output;
    EXPECT_TRUE(std::regex_search(
        job.output,
        std::regex("^" + program + " \\d+\\.\\d+\\.\\d+ \\(git ([0-9a-f]+(-dirty)?|unknown)\\)\\n  LibTorch ")))
        << command << "\n"
        << job.output;
  }
}

TEST(Launch, WanbenchModelSweepsTokensAgainstThePlanInProcessesOfTheirOwn) {
  const std::string sweep = std::string(WANTRAIN_WANBENCH) + " model --model-config " + WANTRAIN_SOURCE_DIR +
                            "/data/configs/wan-tiny.json --tokens-sweep --size 8x8 --iters 1 --warmup 0 --threads 1";
  const Job job = launch(sweep + " --json");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto start = job.output.rfind("\n{");
  const auto doc = nlohmann::json::parse(job.output.substr(start == std::string::npos ? 0 : start + 1));
  // Frames 1, 2, 4, 8 of 8x8 in wan-tiny's (1, 2, 2) patches, each with full
  // attention, chunked (512, the default), chunked with every block
  // checkpointed and fused.
  ASSERT_EQ(doc.at("points").size(), 16u) << job.output;
  const int64_t chunks[] = {0, 512, 512, wt::nn::kFusedAttention};
  for (size_t i = 0; i < 16; ++i) {
    const auto& point = doc["points"][i];
    EXPECT_EQ(point.at("tokens").get<int64_t>(), int64_t(16) << (i / 4)) << point;
    EXPECT_EQ(point.at("attention_chunk").get<int64_t>(), chunks[i % 4]) << point;
    EXPECT_EQ(point.at("grad_checkpoint").get<int64_t>(), i % 4 == 2 ? 1 : 0) << point;
    EXPECT_GT(point.at("peak_tensor_mib").get<double>(), point.at("state_mib").get<double>()) << point;
    EXPECT_GT(point.at("plan_mib").get<double>(), 0.0) << point;
    EXPECT_EQ(point.at("non_finite_losses").get<int>(), 0) << point;
  }
  for (const char* goal : {"peak_8k_over_1k_chunked", "activations_4k_checkpointed_over_chunked", "largest_plan_error",
                           "peak_rss_marginal_growth_fused", "step_time_8k_fused_over_chunked"})
    EXPECT_TRUE(doc.at("goals").contains(goal)) << goal;

  // Under a launcher each rank would start the children: refused.
  const Job ranks = launch_mpi(sweep);
  EXPECT_EQ(ranks.status, 2) << ranks.output;
  EXPECT_GE(occurrences(ranks.output, "option --tokens-sweep: run wanbench model without mpirun or srun"), 1u)
      << ranks.output;
}

TEST(Launch, WanbenchAllreduceChecksEverySizeAndReportsJson) {
  // 1 KiB .. 64 KiB in steps of 4: 1K, 4K, 16K, 64K.
  for (const std::string dtype : {"float32", "bfloat16"}) {
    const Job job = launch_mpi(std::string(WANTRAIN_WANBENCH) + " allreduce --json --dtype " + dtype +
                               " --min-bytes 1024 --max-bytes 65536 --iters 2 --warmup 1 --rounds 1");
    ASSERT_EQ(job.status, 0) << job.output;
    const auto report = nlohmann::json::parse(job.output.substr(job.output.find('{')));
    EXPECT_EQ(report["ranks"], kRanks);
    EXPECT_EQ(report["wrong"], 0);
    ASSERT_EQ(report["rows"].size(), 4u);
    const int64_t item = dtype == "float32" ? 4 : 2;
    for (size_t i = 0; i < 4; ++i) {
      const auto& row = report["rows"][i];
      EXPECT_EQ(row["bytes"], int64_t(1024) << (2 * i));
      EXPECT_EQ(row["count"], (int64_t(1024) << (2 * i)) / item);
      for (const char* impl : {"wantrain", "mpi"}) {
        EXPECT_EQ(row[impl]["wrong"], 0);
        // busbw is algbw * 2(n-1)/n, as nccl-tests define it
        EXPECT_NEAR(row[impl]["busbw_GBps"].get<double>(),
                    row[impl]["algbw_GBps"].get<double>() * 2.0 * (kRanks - 1) / kRanks, 1e-9);
      }
    }
  }
}

// ZeRO-1's collectives against raw MPI, checked the same way: sizes are the
// whole buffer, busbw is algbw * (n-1)/n.
TEST(Launch, WanbenchReduceScatterAndAllGatherCheckEverySize) {
  for (const std::string collective : {"reduce-scatter", "all-gather"}) {
    const Job job = launch_mpi(std::string(WANTRAIN_WANBENCH) + " allreduce --json --collective " + collective +
                               " --min-bytes 1024 --max-bytes 65536 --iters 2 --warmup 1 --rounds 1");
    ASSERT_EQ(job.status, 0) << job.output;
    const auto report = nlohmann::json::parse(job.output.substr(job.output.find('{')));
    EXPECT_EQ(report["collective"], collective);
    EXPECT_EQ(report["wrong"], 0);
    ASSERT_EQ(report["rows"].size(), 4u);
    for (const auto& row : report["rows"])
      for (const char* impl : {"wantrain", "mpi"}) {
        EXPECT_EQ(row[impl]["wrong"], 0);
        EXPECT_NEAR(row[impl]["busbw_GBps"].get<double>(),
                    row[impl]["algbw_GBps"].get<double>() * double(kRanks - 1) / kRanks, 1e-9);
      }
  }
  const Job tiny = launch_mpi(std::string(WANTRAIN_WANBENCH) + " allreduce --collective all-gather --min-bytes 8");
  EXPECT_EQ(tiny.status, 2) << tiny.output;
  EXPECT_EQ(occurrences(tiny.output, "option --min-bytes: all-gather needs at least 16 bytes per rank"), 1u)
      << tiny.output;
}

TEST(Launch, WanbenchUnknownCommandIsStatus2) {
  const Job job = launch_mpi(std::string(WANTRAIN_WANBENCH) + " allgather");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: unknown command 'allgather'"), 1u) << job.output;
}

namespace {
Job wandata(const std::string& args) { return launch(std::string(WANTRAIN_WANDATA) + " " + args); }
}  // namespace

TEST(Launch, DryRunDescribesTheDatasetAndItsEpochOnEveryRank) {
  const auto dir = fresh("dry-data");
  ASSERT_EQ(wandata("synth --out " + dir + " --samples 21 --shards 3").status, 0);
  const Job job =
      launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --backend mpi --data " + dir + " --batch-size 4");
  EXPECT_EQ(job.status, 0) << job.output;
  const int per_epoch = 21 / (4 * kRanks);
  EXPECT_NE(job.output.find("data: " + dir + " (3 shards, 21 samples), latents [N,16,1,32,32] float32"),
            std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find(std::to_string(per_epoch) + " steps per epoch; " + std::to_string(per_epoch * 4 * kRanks) +
                            " samples per epoch (" + std::to_string(21 - per_epoch * 4 * kRanks) + " dropped)"),
            std::string::npos)
      << job.output;
}

TEST(Launch, BadDatasetIsOneLineAndStatus2BeforeAnythingStarts) {
  const auto dir = fresh("bad-data");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/000.h5") << std::string(1000, 'x');
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --data " + dir);
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: data: shard " + dir + "/000.h5: not an HDF5 file, or truncated or corrupt"),
            1u)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "resolved configuration"), 0u);

  const Job missing = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --data " + dir + "-nothing");
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_EQ(occurrences(missing.output, "error: data: " + dir + "-nothing does not exist"), 1u) << missing.output;
}

TEST(Launch, DryRunChecksThatTheDataFitTheModel) {
  const auto dir = fresh("model-fit");
  ASSERT_EQ(wandata("synth --out " + dir + " --samples 8 --shards 1 --frames 2 --size 8x8").status, 0);
  const std::string configs = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/";
  const Job fits = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --data " + dir + " --model-config " +
                              configs + "wan-tiny.json");
  EXPECT_EQ(fits.status, 0) << fits.output;
  const int64_t params = wt::wan::parameter_count(wt::wan::load_model_config(configs + "wan-tiny.json"));
  EXPECT_EQ(occurrences(fits.output, "model: " + configs + "wan-tiny.json: " + std::to_string(params) + " parameters"),
            1u)
      << fits.output;

  const Job wide = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --data " + dir + " --model-config " +
                              configs + "wan2.1-t2v-1.3b.json");
  EXPECT_EQ(wide.status, 2) << wide.output;
  EXPECT_EQ(occurrences(wide.output, "error: data " + dir + " does not fit model config " + configs +
                                         "wan2.1-t2v-1.3b.json: text_emb has width 64, text_dim is 4096"),
            1u)
      << wide.output;

  const Job missing = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --model-config " + dir + "/none.json");
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_EQ(occurrences(missing.output, "error: model config " + dir + "/none.json: no such file"), 1u)
      << missing.output;
}

TEST(Launch, FewerSamplesThanTheGlobalBatchIsStatus2) {
  const auto dir = fresh("few");
  ASSERT_EQ(wandata("synth --out " + dir + " --samples 3 --shards 1").status, 0);
  const Job job = launch_mpi(std::string(WANTRAIN_WANTRAIN) + " --dry-run --data " + dir + " --batch-size 2");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: data: 3 samples are fewer than one global batch"), 1u) << job.output;
}

TEST(Wandata, SynthThenInspectAndVerify) {
  const auto dir = fresh("synth");
  const Job synth = wandata("synth --out " + dir +
                            " --samples 10 --shards 2 --frames 3 --size 8x12 --text-len 8 --text-dim 16 "
                            "--latent-dtype bfloat16 --text-dtype float16");
  ASSERT_EQ(synth.status, 0) << synth.output;
  const Job inspect = wandata("inspect " + dir);
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("2 shards, 10 samples"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("[N,16,3,8,12] bfloat16"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("[N,8,16] float16"), std::string::npos) << inspect.output;
  const Job verify = wandata("verify " + dir);
  EXPECT_EQ(verify.status, 0) << verify.output;
  EXPECT_NE(verify.output.find("OK: 2 shards, 10 samples"), std::string::npos) << verify.output;
  // Refuses to write over a dataset.
  const Job again = wandata("synth --out " + dir);
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_NE(again.output.find("already holds shards"), std::string::npos) << again.output;
}

TEST(Wandata, SynthIsLearnableLatentsFollowTheTextParameters) {
  // Same parameters, same latents: samples whose text embeddings are equal
  // have equal latents; the seed fixes the bytes.
  const auto a = fresh("synth-a"), b = fresh("synth-b");
  ASSERT_EQ(wandata("synth --out " + a + " --samples 6 --shards 1 --seed 4").status, 0);
  ASSERT_EQ(wandata("synth --out " + b + " --samples 6 --shards 1 --seed 4").status, 0);
  const auto da = wt::data::Dataset::open(a), db = wt::data::Dataset::open(b);
  wt::data::SampleReader ra(da), rb(db);
  const auto& s = da.shape();
  auto la = torch::empty({s.channels, s.frames, s.height, s.width}), lb = la.clone();
  auto ta = torch::empty({s.text_len, s.text_dim}), tb = ta.clone();
  int32_t na = 0, nb = 0;
  for (int64_t i = 0; i < 6; ++i) {
    ra.read(i, la, ta, na);
    rb.read(i, lb, tb, nb);
    EXPECT_TRUE(torch::equal(la, lb) && torch::equal(ta, tb)) << i;
    EXPECT_EQ(na, 6);  // one token per blob parameter
    EXPECT_TRUE(torch::all(ta.narrow(0, 6, s.text_len - 6) == 0).item<bool>()) << "zero padding";
    // A visible blob: in some channel it stands out from the background by
    // more than that channel's standard deviation over the dataset (1).
    EXPECT_GT((la.amax({1, 2, 3}) - la.amin({1, 2, 3})).max().item<float>(), 1.0f) << "a visible blob";
  }
}

// --condition vace: the same clips as without, texts of the colour and
// radius alone (as --untold-place gives without a context), and a context
// [2C + 64, F, H, W] of zeros, a dot on the blob's centre and mask ones.
TEST(Wandata, SynthsVaceContextIsADotWhereTheUntoldBlobIs) {
  const auto plain = fresh("synth-plain"), untold = fresh("synth-untold"), vace = fresh("synth-vace");
  const std::string options = " --samples 4 --shards 1 --frames 3 --size 16x16 --text-len 8 --text-dim 16 --seed 2";
  ASSERT_EQ(wandata("synth --out " + plain + options).status, 0);
  ASSERT_EQ(wandata("synth --out " + untold + options + " --untold-place").status, 0);
  const Job job = wandata("synth --out " + vace + options + " --condition vace");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto dp = wt::data::Dataset::open(plain), du = wt::data::Dataset::open(untold),
             dv = wt::data::Dataset::open(vace);
  EXPECT_FALSE(du.shape().has_vace());
  ASSERT_EQ(dv.shape().vace_channels, 2 * 16 + 64);
  EXPECT_EQ(dv.shape().vace_references, 0);
  wt::data::SampleReader rp(dp), ru(du), rv(dv);
  const auto& s = dv.shape();
  auto lp = torch::empty({s.channels, s.frames, s.height, s.width}), lu = lp.clone(), lv = lp.clone();
  auto tp = torch::empty({s.text_len, s.text_dim}), tu = tp.clone(), tv = tp.clone();
  wt::data::SampleCondition condition;
  condition.vace_context = torch::empty({s.vace_channels, s.frames, s.height, s.width});
  for (int64_t i = 0; i < 4; ++i) {
    int32_t np = 0, nu = 0, nv = 0;
    rp.read(i, lp, tp, np);
    ru.read(i, lu, tu, nu);
    rv.read(i, lv, tv, nv, &condition);
    EXPECT_TRUE(torch::equal(lp, lv) && torch::equal(lu, lv)) << "the same clip, sample " << i;
    EXPECT_EQ(nv, 2);
    EXPECT_EQ(nu, 2);
    EXPECT_TRUE(torch::equal(tu, tv));
    EXPECT_TRUE(torch::equal(tv.narrow(0, 0, 2), tp.narrow(0, 0, 2))) << "colour and radius as told in full";
    EXPECT_TRUE(torch::all(tv.narrow(0, 2, s.text_len - 2) == 0).item<bool>()) << "no place, no motion";
    EXPECT_NE(rv.prompt(i).find("where its control video puts it"), std::string::npos) << rv.prompt(i);
    const auto& c = condition.vace_context;
    EXPECT_TRUE(torch::all(c.narrow(0, 0, 16) == 0).item<bool>()) << "inactive: zeros";
    EXPECT_TRUE(torch::all(c.narrow(0, 32, 64) == 1).item<bool>()) << "mask: ones";
    // In each frame the dot's peak is the blob's: the pixel where the
    // clip's latents differ most from their background (each channel's
    // median in the frame: the blob covers less than half of it).
    const auto dot = c.narrow(0, 16, 16).abs().sum(0);  // [F, H, W]
    const auto background = std::get<0>(lv.flatten(2).median(2)).unsqueeze(-1).unsqueeze(-1);
    const auto blob = (lv - background).abs().sum(0);  // [F, H, W]
    for (int64_t f = 0; f < s.frames; ++f) {
      const auto at_dot = dot[f].argmax().item<int64_t>(), at_blob = blob[f].argmax().item<int64_t>();
      EXPECT_LE(std::abs(at_dot / s.width - at_blob / s.width) + std::abs(at_dot % s.width - at_blob % s.width), 2)
          << "sample " << i << " frame " << f;
    }
  }
}

// --condition fun-control: the same clips and texts as vace's, and /y the
// control's latents (the VACE context's reactive half, the same dots) then
// zeros (no start frame).
TEST(Wandata, SynthsFunControlYAsTheVaceControlsDotsAndNoStartFrame) {
  const auto vace = fresh("synth-fc-vace"), fun = fresh("synth-fun-control");
  const std::string options = " --samples 3 --shards 1 --frames 3 --size 16x16 --text-len 8 --text-dim 16 --seed 2";
  ASSERT_EQ(wandata("synth --out " + vace + options + " --condition vace").status, 0);
  const Job job = wandata("synth --out " + fun + options + " --condition fun-control");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto dv = wt::data::Dataset::open(vace), df = wt::data::Dataset::open(fun);
  const auto& s = df.shape();
  ASSERT_EQ(s.condition_channels, 2 * 16);
  EXPECT_FALSE(s.has_vace());
  EXPECT_EQ(s.clip_tokens, 0);
  wt::data::SampleReader rv(dv), rf(df);
  auto lv = torch::empty({s.channels, s.frames, s.height, s.width}), lf = lv.clone();
  auto tv = torch::empty({s.text_len, s.text_dim}), tf = tv.clone();
  wt::data::SampleCondition context, y;
  context.vace_context = torch::empty({2 * 16 + 64, s.frames, s.height, s.width});
  y.y = torch::empty({s.condition_channels, s.frames, s.height, s.width});
  for (int64_t i = 0; i < 3; ++i) {
    int32_t nv = 0, nf = 0;
    rv.read(i, lv, tv, nv, &context);
    rf.read(i, lf, tf, nf, &y);
    EXPECT_TRUE(torch::equal(lv, lf) && torch::equal(tv, tf)) << "the same clip and text, sample " << i;
    EXPECT_EQ(rf.prompt(i), rv.prompt(i));
    EXPECT_TRUE(torch::equal(y.y.narrow(0, 0, 16), context.vace_context.narrow(0, 16, 16))) << "sample " << i;
    EXPECT_TRUE(torch::all(y.y.narrow(0, 16, 16) == 0).item<bool>()) << "no start frame, sample " << i;
  }
}

namespace {
// Every latent of a dataset [N, C, F, H, W], and the text embeddings [N, L, D].
std::pair<torch::Tensor, torch::Tensor> read_dataset(const std::string& dir) {
  const auto dataset = wt::data::Dataset::open(dir);
  wt::data::SampleReader reader(dataset);
  const auto& s = dataset.shape();
  auto latents = torch::empty({dataset.size(), s.channels, s.frames, s.height, s.width});
  auto text = torch::empty({dataset.size(), s.text_len, s.text_dim});
  for (int64_t i = 0; i < dataset.size(); ++i) {
    int32_t len = 0;
    reader.read(i, latents[i], text[i], len);
  }
  return {latents, text};
}
}  // namespace

// --modes K: samples in groups of K share a prompt (the text, and the
// /prompt line wansample groups them by); each starts in its own place and
// moves its own way, so every frame differs, and the group's mean video,
// which a sampler drawing the blurred mean would give, is far from each of
// them.
TEST(Wandata, SynthModesGiveEachPromptKVideos) {
  const auto dir = fresh("synth-modes");
  const Job synth =
      wandata("synth --out " + dir + " --samples 6 --modes 3 --shards 1 --frames 3 --size 16x16 --seed 2");
  ASSERT_EQ(synth.status, 0) << synth.output;
  const auto [latents, text] = read_dataset(dir);
  const auto dataset = wt::data::Dataset::open(dir);
  wt::data::SampleReader reader(dataset);
  std::vector<std::string> prompts;
  for (int64_t i = 0; i < 6; ++i) prompts.push_back(reader.prompt(i));
  for (int64_t prompt = 0; prompt < 2; ++prompt) {
    const auto group = latents.narrow(0, 3 * prompt, 3);  // [3, C, F, H, W]
    for (int64_t frame = 0; frame < 3; ++frame) {
      const auto shown = group.select(2, frame);  // [3, C, H, W]
      const auto mean = shown.mean(0);
      for (int64_t k = 0; k < 3; ++k) {
        SCOPED_TRACE(fmt::format("prompt {}, video {}, frame {}", prompt, k, frame));
        if (k > 0) {
          EXPECT_GT((shown[k] - shown[0]).abs().max().item<float>(), 1.0f) << "its own place and way";
        }
        // Apart by more than a channel's standard deviation over the data (1), as a visible blob is.
        EXPECT_GT((shown[k] - mean).abs().max().item<float>(), 1.0f) << "not the mean of the prompt's videos";
      }
    }
    for (int64_t k = 1; k < 3; ++k) {
      EXPECT_TRUE(torch::equal(text[3 * prompt + k], text[3 * prompt]));
      EXPECT_EQ(prompts[3 * prompt + k], prompts[3 * prompt]);
    }
  }
  EXPECT_FALSE(torch::equal(text[0], text[3])) << "two prompts";
  EXPECT_NE(prompts[0], prompts[3]);
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--samples 7 --modes 3", "option --modes: --samples 7 is no whole number of prompts of 3 videos each"},
           {"--modes 0", "option --modes: must be at least 1"}}) {
    const Job bad = wandata("synth --out " + fresh("synth-modes-bad") + " " + args);
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_NE(bad.output.find(expected), std::string::npos) << bad.output;
  }
}

TEST(Wandata, SynthLatentsHaveUnitScalePerChannelLikeNormalisedVaeLatents) {
  const auto dir = fresh("synth-scale");
  ASSERT_EQ(wandata("synth --out " + dir + " --samples 400 --shards 2 --frames 2 --size 16x16 --seed 8").status, 0);
  const auto latents = read_dataset(dir).first.transpose(0, 1).flatten(1);  // [C, N*F*H*W]
  // Normalised with the statistics of another population of the same task:
  // zero mean and unit std up to the sampling error of 400 samples.
  const auto mean = latents.mean(1), std = latents.std(1);
  EXPECT_LT(mean.abs().max().item<float>(), 0.15f) << mean;
  EXPECT_LT((std - 1).abs().max().item<float>(), 0.15f) << std;
}

TEST(Wandata, SynthDatasetsOfOneTaskShareTheTextEncodingAcrossSeeds) {
  // Token 0 encodes the colour, one of 4 values: a training set and a
  // validation set (other --seed, same --task-seed) use the same 4 vectors,
  // another task other ones.
  const auto train = fresh("synth-task-train"), val = fresh("synth-task-val"), other = fresh("synth-task-other");
  ASSERT_EQ(wandata("synth --out " + train + " --samples 40 --shards 1 --seed 1").status, 0);
  ASSERT_EQ(wandata("synth --out " + val + " --samples 40 --shards 1 --seed 2").status, 0);
  ASSERT_EQ(wandata("synth --out " + other + " --samples 40 --shards 1 --seed 2 --task-seed 9").status, 0);
  const auto colours = [](const std::string& dir) {
    const auto tokens = read_dataset(dir).second.select(1, 0);  // [N, D]
    return std::get<0>(torch::unique_dim(tokens, 0));           // [distinct, D]
  };
  const auto a = colours(train), b = colours(val), c = colours(other);
  ASSERT_EQ(a.size(0), 4);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
  // And the bytes differ with the seed.
  EXPECT_FALSE(torch::equal(read_dataset(train).first, read_dataset(val).first));
}

TEST(Wandata, VerifyListsEveryProblemAndFails) {
  const auto dir = fresh("verify-bad");
  ASSERT_EQ(wandata("synth --out " + dir + " --samples 4 --shards 2").status, 0);
  // Poison sample 1 of the second shard with NaN, and add a shard of another text width.
  const std::string script =
      "import h5py, numpy as np\n"
      "f = h5py.File('" +
      dir +
      "/shard-00001.h5', 'r+')\n"
      "x = f['latents'][1]; x[0, 0, 0, 0] = np.nan; f['latents'][1] = x\n"
      "f['text_len'][0] = 999\n"  // a bad field first: the NaN after it must still be found
      "g = h5py.File('" +
      dir +
      "/shard-00002.h5', 'w')\n"
      "g.attrs['format'] = 'wantrain-shard'; g.attrs['version'] = 1\n"
      "g['latents'] = np.zeros((1, 16, 2, 32, 32), np.float32)\n"
      "g['text_emb'] = np.zeros((1, 16, 32), np.float32)\n"  // another text width: not a bucket
      "g['text_len'] = np.zeros(1, np.int32)\n";
  std::ofstream(dir + "/poison.py") << script;
  ASSERT_EQ(std::system((std::string(WANTRAIN_PYTHON) + " " + dir + "/poison.py").c_str()), 0);
  const Job verify = wandata("verify " + dir);
  EXPECT_EQ(verify.status, 1) << verify.output;
  EXPECT_NE(verify.output.find("problem: shard " + dir + "/shard-00001.h5 sample 1: /latents holds NaN or Inf"),
            std::string::npos)
      << verify.output;
  EXPECT_NE(verify.output.find("problem: shard " + dir + "/shard-00002.h5 has latents [N,16,2,32,32] float32"),
            std::string::npos)
      << verify.output;
  EXPECT_NE(
      verify.output.find("problem: data: shard " + dir + "/shard-00001.h5: sample 0: text_len 999 is outside 0..L=16"),
      std::string::npos)
      << verify.output;
  EXPECT_NE(verify.output.find("3 problems in " + dir), std::string::npos) << verify.output;
}

TEST(Wandata, SynthWithTheSameSeedWritesTheSameBytes) {
  const auto a = fresh("synth-same-a"), b = fresh("synth-same-b");
  const std::string args = " --samples 6 --shards 2 --frames 1 --size 8x8 --text-len 8 --text-dim 8 --seed 7";
  ASSERT_EQ(wandata("synth --out " + a + args).status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a timestamp would differ now
  ASSERT_EQ(wandata("synth --out " + b + args).status, 0);
  for (const char* shard : {"/shard-00000.h5", "/shard-00001.h5"}) {
    const auto bytes_a = wt::testing::read_text(a + shard), bytes_b = wt::testing::read_text(b + shard);
    EXPECT_FALSE(bytes_a.empty()) << shard;
    EXPECT_TRUE(bytes_a == bytes_b) << shard << " differs between two runs with the same seed";
  }
}

TEST(Wandata, SplitThenMergeKeepsEverySampleInOrder) {
  const auto src = fresh("reshard-src"), parts = fresh("reshard-parts"), joined = fresh("reshard-joined");
  ASSERT_EQ(wandata("synth --out " + src + " --samples 10 --shards 2 --latent-dtype float16").status, 0);
  const Job split = wandata("split " + src + " --out " + parts + " --shards 4");
  ASSERT_EQ(split.status, 0) << split.output;
  const Job merge = wandata("merge " + parts + " --out " + joined);
  ASSERT_EQ(merge.status, 0) << merge.output;
  const auto a = wt::data::Dataset::open(src), p = wt::data::Dataset::open(parts), j = wt::data::Dataset::open(joined);
  EXPECT_EQ(p.shards().size(), 4u);
  EXPECT_EQ(j.shards().size(), 1u);
  ASSERT_EQ(j.size(), 10);
  wt::data::SampleReader ra(a), rj(j);
  const auto& s = a.shape();
  auto la = torch::empty({s.channels, s.frames, s.height, s.width}, torch::kHalf), lj = la.clone();
  auto ta = torch::empty({s.text_len, s.text_dim}), tj = ta.clone();
  int32_t na = 0, nj = 0;
  for (int64_t i = 0; i < 10; ++i) {
    ra.read(i, la, ta, na);
    rj.read(i, lj, tj, nj);
    EXPECT_TRUE(torch::equal(la, lj) && torch::equal(ta, tj) && na == nj) << i;
    EXPECT_EQ(ra.prompt(i), rj.prompt(i));
  }
}

// stage: with W ranks, K per node, node n holds the shards s whose reader
// under --shard-affinity (s mod W) runs there (reader / K == n).
TEST(Wandata, StageCopiesTheShardsOfANodesRanksAndRefusesBadOptions) {
  const auto src = fresh("stage-src"), local = fresh("stage-local");
  ASSERT_EQ(wandata("synth --out " + src + " --samples 12 --shards 6 --frames 1 --size 8x8").status, 0);
  const Job job = wandata("stage " + src + " --out " + local + " --ranks 4 --ranks-per-node 2 --node 1");
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_NE(job.output.find("node 1 of 2 (ranks 2-3 of 4): copied 2 of the 6 shards"), std::string::npos) << job.output;
  std::vector<std::string> held;
  for (const auto& entry : std::filesystem::directory_iterator(local)) held.push_back(entry.path().filename().string());
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<std::string>{"shard-00002.h5", "shard-00003.h5", "staged-shards.txt"}));
  const std::string listed = wt::testing::read_text(local + "/staged-shards.txt");
  for (int k = 0; k < 6; ++k)
    EXPECT_NE(listed.find("shard-0000" + std::to_string(k) + ".h5\n"), std::string::npos) << listed;
  for (int k = 2; k < 4; ++k)
    EXPECT_EQ(wt::testing::read_text(local + "/shard-0000" + std::to_string(k) + ".h5"),
              wt::testing::read_text(src + "/shard-0000" + std::to_string(k) + ".h5"));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--ranks 4 --ranks-per-node 2 --node 2", "error: option --node: must be between 0 and 1 (4 ranks, 2 per node)"},
      {"--ranks 4 --ranks-per-node 3 --node 0", "error: option --ranks-per-node: must divide the 4 ranks"},
      {"--node 0", "error: option --ranks: the training job's rank count is required (at least 1)"}};
  for (const auto& [options, line] : bad) {
    const Job refused = wandata("stage " + src + " --out " + local + " " + options);
    EXPECT_EQ(refused.status, 2) << options << "\n" << refused.output;
    EXPECT_EQ(occurrences(refused.output, line), 1u) << options << "\n" << refused.output;
  }
  // Without --shard-affinity every rank reads every shard: a node's part is one line, not trained on as the whole.
  const Job partial =
      launch(std::string(WANTRAIN_WANTRAIN) + " --model-config " + WANTRAIN_SOURCE_DIR +
             "/data/configs/wan-tiny.json --steps 1 --data " + local + " --output-dir " + fresh("stage-partial-run"));
  EXPECT_EQ(partial.status, 2) << partial.output;
  EXPECT_EQ(occurrences(partial.output, "lacks shard-00000.h5 of " + local +
                                            ", which its staged-shards.txt lists: one rank reads every shard"),
            1u)
      << partial.output;
  // A shard of another dataset would join this one in the job's view.
  const auto other = fresh("stage-other");
  ASSERT_EQ(wandata("synth --out " + other + " --samples 2 --shards 1").status, 0);
  std::filesystem::copy_file(other + "/shard-00000.h5", local + "/shard-00099.h5");
  const Job foreign = wandata("stage " + src + " --out " + local + " --ranks 4 --ranks-per-node 2 --node 1");
  EXPECT_EQ(foreign.status, 2) << foreign.output;
  EXPECT_EQ(
      occurrences(foreign.output, "error: option --out: " + local + " holds shard-00099.h5, which is not a shard of " +
                                      src + ": use an empty directory"),
      1u)
      << foreign.output;
}

TEST(Launch, WanbenchIoComparesTheLoaderWithARawReadOfTheSameBytes) {
  const auto dir = fresh("io-bench");
  const Job job =
      launch(std::string(WANTRAIN_WANBENCH) + " io --json --shapes tiny --tiny-samples 64 --rounds 1 --dir " + dir);
  ASSERT_EQ(job.status, 0) << job.output;
  const auto report = nlohmann::json::parse(job.output.substr(job.output.find('{')));
  ASSERT_EQ(report["rows"].size(), 1u);
  const auto& row = report["rows"][0];
  EXPECT_EQ(row["shape"], "tiny");
  EXPECT_EQ(row["samples"], 64);
  // latents [16,1,32,32] float16 + text [16,64] float32, per sample
  EXPECT_EQ(row["sample_bytes"].get<double>(), 16 * 32 * 32 * 2 + 16 * 64 * 4);
  EXPECT_NEAR(row["ratio"].get<double>(), row["loader_MBps"].get<double>() / row["raw_MBps"].get<double>(), 1e-9);
  EXPECT_GT(row["loader_samples_per_s"].get<double>(), 0);
  // One round of 64 small samples is below what can be measured: said on the row.
  const auto notes = row["unreliable"].dump();
  EXPECT_NE(notes.find("1 round: a median needs --rounds 3 or more"), std::string::npos) << notes;
  EXPECT_NE(notes.find("below the 20 ms the clock and page cache resolve"), std::string::npos) << notes;

  // Three buckets: the mean sample of [16,1,32,32], [16,1,32,48] and
  // [16,5,32,32] float16 latents with their float32 text, and the batches
  // the timed rounds delivered.
  const Job buckets = launch(std::string(WANTRAIN_WANBENCH) +
                             " io --json --shapes buckets --bucket-samples 16 --rounds 2 --dir " + dir);
  ASSERT_EQ(buckets.status, 0) << buckets.output;
  const auto bucket_row = nlohmann::json::parse(buckets.output.substr(buckets.output.find('{')))["rows"][0];
  EXPECT_EQ(bucket_row["buckets"], 3);
  EXPECT_EQ(bucket_row["samples"], 48);
  EXPECT_DOUBLE_EQ(bucket_row["sample_bytes"].get<double>(), 16 * 32 * (32 + 48 + 5 * 32) * 2 / 3.0 + 16 * 64 * 4);
  EXPECT_EQ(bucket_row["loader_batches_timed"], 2 * 3 * 4);  // 2 rounds of 3 buckets x 16 / 4
}

TEST(Launch, WanbenchStrictRefusesUnreliableFigures) {
  const auto dir = fresh("io-bench-strict");
  const Job io =
      launch(std::string(WANTRAIN_WANBENCH) + " io --shapes tiny --tiny-samples 16 --rounds 1 --strict --dir " + dir);
  EXPECT_EQ(io.status, 1) << io.output;
  EXPECT_NE(io.output.find("UNRELIABLE: 1 round"), std::string::npos) << io.output;
  EXPECT_NE(io.output.find("wanbench io: 1 unreliable row (--strict)"), std::string::npos) << io.output;
  const Job ckpt = launch(std::string(WANTRAIN_WANBENCH) + " ckpt --model-config " + WANTRAIN_SOURCE_DIR +
                          "/data/configs/wan-tiny.json --size 8x8 --steps 1 --rounds 1 --strict");
  EXPECT_EQ(ckpt.status, 1) << ckpt.output;
  EXPECT_NE(ckpt.output.find("UNRELIABLE: 1 round: a median needs --rounds 3 or more"), std::string::npos)
      << ckpt.output;
}
