// Whole jobs under mpiexec: how they end when something goes wrong, and what
// the apps print. Each test launches a job and reads its exit status and output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace {

struct Job {
  int status = -1;  // exit status of mpiexec
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

Job launch(const std::string& command_line) {
  const auto start = std::chrono::steady_clock::now();
  Job job;
  FILE* pipe = popen((command_line + " 2>&1").c_str(), "r");
  if (!pipe) return job;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) job.output += buffer.data();
  const int raw = pclose(pipe);
  job.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

Job launch_mpi(const std::string& program_and_args) {
  // mpiexec PREFLAGS program POSTFLAGS args: the program is the first word.
  const auto space = program_and_args.find(' ');
  return launch(std::string(WANTRAIN_MPIEXEC) + " " + program_and_args.substr(0, space) + " " +
                WANTRAIN_MPIEXEC_POSTFLAGS + " " + (space == std::string::npos ? "" : program_and_args.substr(space + 1)));
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const int kRanks = WANTRAIN_TEST_RANKS;
// Guards against a hang only; the jobs below end in a few seconds.
constexpr double kHangGuardSeconds = 60;

}  // namespace

TEST(Launch, SkippedCollectiveEndsTheJobWithTheTimeoutLine) {
  const Job job = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " skip 2");
  EXPECT_NE(job.status, 0) << job.output;
  // rank 0 waited in collective #1 (all_reduce) and reports it, naming itself.
  EXPECT_TRUE(std::regex_search(job.output,
                                std::regex("\\[rank 0/" + std::to_string(kRanks) +
                                           " on [^\\]]+\\]: error: MPI all_reduce #1 \\(Float x 16, sum\\) did not "
                                           "complete within 2 s \\(--comm-timeout\\)")))
      << job.output;
  EXPECT_LT(job.seconds, kHangGuardSeconds);
}

TEST(Launch, ErrorOnOneRankEndsEveryRankWithThatRanksLine) {
  const Job job = launch_mpi(std::string(WANTRAIN_FAULT_JOB) + " throw");
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_NE(job.output.find("[rank " + std::to_string(kRanks - 1) + "/" + std::to_string(kRanks) +
                            " on "),
            std::string::npos)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "error: injected failure on the last rank"), 1u) << job.output;
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
    EXPECT_TRUE(std::regex_search(job.output, std::regex("\\n +" + std::to_string(r) + " +\\S+ +\\d+/\\d+ +cpu")))
        << "rank " << r << " missing from the world table\n"
        << job.output;
  EXPECT_NE(job.output.find("effective batch: 4 per rank x " + std::to_string(kRanks) + " ranks x 1 accumulation "
                            "steps = " + std::to_string(4 * kRanks)),
            std::string::npos)
      << job.output;
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
  EXPECT_TRUE(std::regex_search(job.output, std::regex("^wantrain \\d+\\.\\d+\\.\\d+\\n  LibTorch "))) << job.output;
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

TEST(Launch, WanbenchUnknownCommandIsStatus2) {
  const Job job = launch_mpi(std::string(WANTRAIN_WANBENCH) + " allgather");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: unknown command 'allgather'"), 1u) << job.output;
}
