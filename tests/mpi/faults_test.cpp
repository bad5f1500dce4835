// The fault-injection suite (ctest -L faults): whole 2-rank wantrain jobs
// that meet a fault (a killed rank, a failing read, a slow or full file
// system, a stop signal in each window of the run's life) and must end
// within a bounded time, with the documented status and one line, leaving
// `latest` loadable. Delays and failures are injected through
// util/test_hooks.hpp where a real one cannot be made on demand.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::Background;
using wt::testing::children_of;
using wt::testing::finish;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::occurrences;
using wt::testing::start_background;
using wt::testing::wait_until;
using namespace wt::testing::train_runs;

// How long a job may take to end after its fault (the bound for a
// killed rank; every other fault here ends faster).
constexpr double kEndWithinSeconds = 30;

// The figure docs/cluster.md's failure table quotes, in the test's output.
void report_time(const char* fault, double seconds) {
  std::printf("[  FIGURE  ] %s: the job ended %.2f s after it\n", fault, seconds);
}

class Faults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { data_ = synth_tiny_data("faults-data", 40, 9); }

  static std::string arguments(const std::string& dir, const std::string& options) {
    return "--model-config " + tiny_config() + " --data " + data_ + " --output-dir " + dir +
           " --seed 11 --threads 1 --backend mpi --log-every 1 --batch-size 2 " + options;
  }
  // The 2-rank job; `environment` (VAR=value ...) is set for every rank.
  static std::string command(const std::string& dir, const std::string& options, const std::string& environment = "") {
    return (environment.empty() ? "" : "env " + environment + " ") +
           wt::testing::mpi_command(2, WANTRAIN_WANTRAIN, arguments(dir, options));
  }
  static Job train(const std::string& dir, const std::string& options, const std::string& environment = "") {
    return launch(command(dir, options, environment));
  }
  // `latest` names a complete checkpoint; its step.
  static int64_t latest_step(const std::string& dir) {
    const auto latest = wt::ckpt::linked_checkpoint(dir, "latest");
    if (!latest) return -1;
    return wt::ckpt::read_checkpoint(*latest).state.step;
  }
  static bool has_checkpoint_files(const std::string& dir) {
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().filename().string().rfind("step-", 0) == 0) return true;
    return false;
  }
  // run.json: how the run ended, as rank 0 recorded it.
  static nlohmann::json run_record(const std::string& dir) {
    return nlohmann::json::parse(wt::testing::read_text(dir + "/run.json"), nullptr, false);
  }
  // Sends `signal` to the last rank of a background job.
  static void signal_last_rank(const Background& job, int signal) {
    const auto ranks = children_of(job.pid);
    ASSERT_EQ(ranks.size(), 2u);
    ASSERT_EQ(kill(ranks.back(), signal), 0);
  }

  static std::string data_;
};
std::string Faults::data_;

// A rank killed outright (no handler runs): the launcher ends the whole job
// within seconds, `latest` loads, and --resume auto finishes the run.
TEST_F(Faults, ASigkilledRankEndsTheJobAndResumeAutoFinishesTheRun) {
  const auto dir = fresh("faults-sigkill");
  const Background job = start_background(command(dir, "--steps 100000 --save-every 2"), dir + ".log");
  ASSERT_TRUE(wait_until([&] { return training_lines(dir).size() >= 5 && latest_step(dir) >= 2; }, 120));
  signal_last_rank(job, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const Job ended = finish(job);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_NE(ended.status, 0) << ended.output;
  EXPECT_LT(seconds, kEndWithinSeconds) << ended.output;
  report_time("SIGKILL of one rank", seconds);
  // The launcher names the lost rank (Open MPI's wording).
  EXPECT_EQ(occurrences(ended.output, "process rank 1 with PID"), 1u) << ended.output;
  EXPECT_EQ(occurrences(ended.output, "exited on signal 9"), 1u) << ended.output;
  const int64_t step = latest_step(dir);
  ASSERT_GE(step, 2) << ended.output;
  // Rank 0 was ended by the launcher: run.json still says the start is under way.
  EXPECT_TRUE(run_record(dir)["exit_status"].is_null()) << run_record(dir).dump();
  const Job resumed = train(dir, "--steps " + std::to_string(step + 2) + " --resume auto");
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(training_lines(dir).back()["step"], step + 2);
  // The killed start is an earlier run of the resumed one, with no exit status.
  const auto record = run_record(dir);
  EXPECT_EQ(record["exit_status"], 0) << record.dump();
  ASSERT_EQ(record["earlier_runs"].size(), 1u) << record.dump();
  EXPECT_TRUE(record["earlier_runs"][0]["exit_status"].is_null()) << record.dump();
  const Job report = launch(std::string(WANTRAIN_WANTRAIN) + " report " + dir);
  EXPECT_EQ(report.status, 0) << report.output;
  EXPECT_EQ(occurrences(report.output, "ended without a record (killed, or an error on another rank) (exit status -)"),
            1u)
      << report.output;
}

// A read that fails on one rank in the middle of training ends every rank
// at once with that rank's line (not the comm timeout's), status 1.
TEST_F(Faults, AReadErrorOnOneRankDuringTrainingEndsTheJobWithItsLine) {
  const auto dir = fresh("faults-read");
  // MPMD: the same program and options, the failure armed on rank 1 only.
  const std::string args = arguments(dir, "--steps 100000 --save-every 2 --comm-timeout 600");
  const std::string line = std::string(WANTRAIN_MPIEXEC_EXECUTABLE) + " " + WANTRAIN_MPIEXEC_PREFLAGS + " " +
                           WANTRAIN_MPIEXEC_NUMPROC_FLAG + " 1 " + WANTRAIN_WANTRAIN + " " + args + " : " +
                           WANTRAIN_MPIEXEC_NUMPROC_FLAG + " 1 env WANTRAIN_TEST_FAIL=sample_read:30 " +
                           WANTRAIN_WANTRAIN + " " + args;
  const Job job = launch("timeout 120 " + line);
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_LT(job.seconds, kEndWithinSeconds) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: data: cannot read sample"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "injected failure at sample_read"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "did not complete"), 0u) << job.output;
  EXPECT_GE(latest_step(dir), 2) << job.output;
  report_time("a read error on one rank (whole job, start-up included)", job.seconds);
}

// A usage error on one rank during start-up (its --init unreadable there
// only) is that rank's one line and status 2 for the job, at once.
TEST_F(Faults, AStartUpErrorOnOneRankIsItsLineAndStatus2AtOnce) {
  const auto dir = fresh("faults-startup");
  const std::string args = arguments(dir, "--steps 4 --comm-timeout 600");
  const std::string line = std::string(WANTRAIN_MPIEXEC_EXECUTABLE) + " " + WANTRAIN_MPIEXEC_PREFLAGS + " " +
                           WANTRAIN_MPIEXEC_NUMPROC_FLAG + " 1 " + WANTRAIN_WANTRAIN + " " + args + " : " +
                           WANTRAIN_MPIEXEC_NUMPROC_FLAG + " 1 " + WANTRAIN_WANTRAIN + " " + args + " --init " + dir +
                           "-absent.safetensors";
  const Job job = launch("timeout 120 " + line);
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_LT(job.seconds, kEndWithinSeconds) << job.output;
  EXPECT_EQ(occurrences(job.output, "[rank 1/2 on "), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, dir + "-absent.safetensors"), 1u) << job.output;
  EXPECT_FALSE(has_checkpoint_files(dir));
  report_time("a start-up error on one rank (whole job)", job.seconds);
}

// A checkpoint write slower than --comm-timeout is not a dead rank: the
// others wait for it, and the run finishes normally.
TEST_F(Faults, ASlowCheckpointWriteIsNotTakenForADeadRank) {
  const auto dir = fresh("faults-slow-writer");
  const Job job = train(dir, "--steps 5 --save-every 2 --comm-timeout 1", "WANTRAIN_TEST_DELAY=checkpoint_write:2.5");
  EXPECT_EQ(job.status, 0) << job.output;
  EXPECT_EQ(occurrences(job.output, "did not complete"), 0u) << job.output;
  EXPECT_EQ(latest_step(dir), 5);
}

// Pre-emption while the stop checkpoint is slow to write: it is written,
// and the exit is still the requeue status.
TEST_F(Faults, APreemptionCheckpointSlowerThanTheCommTimeoutIsWrittenAndExits75) {
  const auto dir = fresh("faults-slow-preempt");
  const Background job = start_background(
      command(dir, "--steps 100000 --comm-timeout 1", "WANTRAIN_TEST_DELAY=checkpoint_write:3"), dir + ".log");
  ASSERT_TRUE(wait_until([&] { return training_lines(dir).size() >= 3; }, 120));
  signal_last_rank(job, SIGTERM);
  const Job ended = finish(job);
  EXPECT_EQ(ended.status, 75) << ended.output;
  EXPECT_EQ(occurrences(ended.output, "did not complete"), 0u) << ended.output;
  EXPECT_GE(latest_step(dir), 3) << ended.output;
  const auto record = run_record(dir);
  EXPECT_EQ(record["exit_status"], 75) << record.dump();
  EXPECT_EQ(record["exit_reason"],
            fmt::format("stopped at step {} by SIGTERM: checkpoint written, requeue to go on", latest_step(dir)))
      << record.dump();
  EXPECT_EQ(record["last_step"], latest_step(dir));
}

// A write that never finishes ends the job after --checkpoint-timeout with
// the writer's own line; the previous checkpoint stays `latest`.
TEST_F(Faults, ACheckpointWriteThatNeverFinishesEndsTheJobWithItsOwnLine) {
  const auto dir = fresh("faults-hung-writer");
  ASSERT_EQ(train(dir, "--steps 2").status, 0);
  const Job job = train(dir, "--steps 6 --save-every 2 --resume auto --checkpoint-timeout 2 --comm-timeout 1",
                        "WANTRAIN_TEST_DELAY=checkpoint_write:600");
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_LT(job.seconds, kEndWithinSeconds) << job.output;
  EXPECT_EQ(occurrences(job.output, "has not finished after 2 s (--checkpoint-timeout)"), 1u) << job.output;
  EXPECT_EQ(occurrences(job.output, "did not complete"), 0u) << job.output;
  EXPECT_EQ(latest_step(dir), 2);
  const auto record = run_record(dir);  // from the fatal hook, before the abort
  EXPECT_EQ(record["exit_status"], 1) << record.dump();
  EXPECT_EQ(record["exit_reason"].get<std::string>().rfind("error: a checkpoint write in " + dir, 0), 0u)
      << record.dump();
  report_time("a write that never finishes, --checkpoint-timeout 2 (whole job)", job.seconds);
}

// A stop signal during start-up: nothing to save, the requeue status.
TEST_F(Faults, AStopSignalBeforeTheFirstStepExits75WithNothingToSave) {
  const auto dir = fresh("faults-signal-start");
  const Background job =
      start_background(command(dir, "--steps 4", "WANTRAIN_TEST_DELAY=before_first_step:5"), dir + ".log");
  ASSERT_TRUE(wait_until(
      [&] { return wt::testing::read_text(job.log).find("resolved configuration") != std::string::npos; }, 60));
  signal_last_rank(job, SIGTERM);
  const Job ended = finish(job);
  EXPECT_EQ(ended.status, 75) << ended.output;
  EXPECT_EQ(occurrences(ended.output, "stopping before the first step on SIGTERM: nothing to save; exit status 75"), 1u)
      << ended.output;
  EXPECT_FALSE(has_checkpoint_files(dir));
  EXPECT_TRUE(training_lines(dir).empty());
  const auto record = run_record(dir);
  EXPECT_EQ(record["exit_status"], 75) << record.dump();
  EXPECT_EQ(record["exit_reason"], "stopped before the first step by SIGTERM (nothing to save)") << record.dump();
  EXPECT_EQ(record["steps"], 0);
}

// A stop signal while the final checkpoint is written: it completes, the
// exit is 75, and the requeued run only writes the weights.
TEST_F(Faults, AStopSignalDuringTheFinalCheckpointFinishesItAndExits75) {
  const auto dir = fresh("faults-signal-final");
  const Background job =
      start_background(command(dir, "--steps 3", "WANTRAIN_TEST_DELAY=checkpoint_write:5"), dir + ".log");
  ASSERT_TRUE(wait_until([&] { return training_lines(dir).size() >= 3; }, 120));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // into the 5 s write
  signal_last_rank(job, SIGTERM);
  const Job ended = finish(job);
  EXPECT_EQ(ended.status, 75) << ended.output;
  EXPECT_EQ(occurrences(ended.output, "stopping after the last step on SIGTERM: the final checkpoint is complete"), 1u)
      << ended.output;
  EXPECT_EQ(latest_step(dir), 3);
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  const Job requeued = train(dir, "--steps 3 --resume auto");
  EXPECT_EQ(requeued.status, 0) << requeued.output;
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_EQ(training_lines(dir).size(), 3u);
}

// A stop signal after the run finished is ignored: the job succeeded.
TEST_F(Faults, AStopSignalAfterTheRunFinishedIsIgnored) {
  const auto dir = fresh("faults-signal-after");
  const Background job = start_background(command(dir, "--steps 2", "WANTRAIN_TEST_DELAY=after_fit:4"), dir + ".log");
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir + "/model-config.json"); }, 120));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  signal_last_rank(job, SIGTERM);
  const Job ended = finish(job);
  EXPECT_EQ(ended.status, 0) << ended.output;
  EXPECT_EQ(occurrences(ended.output, "stopping"), 0u) << ended.output;
}

// SLURM's warning signal while the finished process exits (after its
// handlers, while MPI and the libraries wind down) is ignored too: status 0,
// not 128 + SIGUSR1.
TEST_F(Faults, ASignalWhileTheProcessExitsIsIgnored) {
  const auto dir = fresh("faults-signal-exit");
  const Background job = start_background(command(dir, "--steps 2", "WANTRAIN_TEST_DELAY=after_run:4"), dir + ".log");
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir + "/model-config.json"); }, 120));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  signal_last_rank(job, SIGUSR1);
  const Job ended = finish(job);
  EXPECT_EQ(ended.status, 0) << ended.output;
}

// A full file system (a 4 MB tmpfs, filled up): the write fails with one
// line naming the checkpoint and the cause, the run stops with status 1,
// `latest` is the last complete checkpoint, loadable, and no partial file is
// left. Mounting needs root with CAP_SYS_ADMIN (as in CI); elsewhere the
// test is skipped with that reason.
TEST_F(Faults, AFullFileSystemFailsTheWriteAndKeepsLatest) {
  const auto dir = run_dir("faults-full");
  launch("umount " + dir + " 2>/dev/null");  // left by an earlier run that failed
  fresh("faults-full");
  fs::create_directories(dir);
  if (launch("mount -t tmpfs -o size=4m tmpfs " + dir).status != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)";
  struct Unmount {
    std::string dir;
    ~Unmount() { launch("umount " + dir); }
  } unmount{dir};
  const Job first = train(dir, "--steps 2");
  ASSERT_EQ(first.status, 0) << first.output;
  const auto checkpoint_bytes = fs::file_size(*wt::ckpt::linked_checkpoint(dir, "latest"));
  // Fill it, leaving room for the metrics lines but not for a checkpoint.
  launch("dd if=/dev/zero of=" + dir + "/filler bs=4096 2>/dev/null; truncate -s -" +
         std::to_string(checkpoint_bytes / 2) + " " + dir + "/filler");
  const Job job = train(dir, "--steps 4 --save-every 4 --resume auto");
  EXPECT_EQ(job.status, 1) << job.output;
  EXPECT_EQ(occurrences(job.output, "checkpoint " + dir + "/step-00000004.h5.tmp: cannot write:"), 1u) << job.output;
  // The checkpoint's line names the cause. (run.json and the TensorBoard
  // file, which may meet the full disk first, only warn.)
  const auto cause = job.output.find("checkpoint " + dir + "/step-00000004.h5.tmp: cannot write:");
  ASSERT_NE(cause, std::string::npos) << job.output;
  EXPECT_NE(job.output.substr(cause, job.output.find('\n', cause) - cause).find("No space left on device"),
            std::string::npos)
      << job.output;
  EXPECT_EQ(occurrences(job.output, "Segmentation fault"), 0u) << job.output;
  EXPECT_LT(job.seconds, kEndWithinSeconds) << job.output;
  EXPECT_EQ(latest_step(dir), 2);
  EXPECT_FALSE(fs::exists(dir + "/step-00000004.h5.tmp"));
  report_time("a full file system (whole job)", job.seconds);
}

}  // namespace
