// Checkpoints as users meet them: whole wantrain jobs under mpiexec that
// save, stop, resume, get signalled, meet bad files, and export.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/io/safetensors.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using wt::testing::children_of;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using namespace wt::testing::train_runs;

class Checkpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // 40 samples, global batch 4: 10 steps an epoch, so step 7 is mid-epoch.
    data_ = synth_tiny_data("ckpt-data", 40, 9);
  }

  static std::string command(int ranks, const std::string& dir, const std::string& options,
                             const std::string& model_config = tiny_config()) {
    return mpi_command(ranks, WANTRAIN_WANTRAIN,
                       "--model-config " + model_config + " --data " + data_ + " --output-dir " + dir +
                           " --seed 11 --threads 1 --backend mpi --log-every 1 --lr 1e-3 " + options);
  }
  static Job train(int ranks, const std::string& dir, const std::string& options,
                   const std::string& model_config = tiny_config()) {
    const Job job = launch(command(ranks, dir, options, model_config));
    EXPECT_LT(job.seconds, kHangGuardSeconds);
    return job;
  }

  static std::string data_;
};
std::string Checkpoints::data_;

// One job owns an output directory: a second one is refused before it
// touches anything (the first job's partial write and metrics stay), and
// the directory is free again once the holder is gone.
TEST_F(Checkpoints, ASecondJobOnTheSameOutputDirectoryIsRefusedAndTouchesNothing) {
  const auto dir = fresh("ckpt-locked");
  fs::create_directories(dir);
  // The holder: this test process, as a running job would hold it.
  const int fd = ::open((dir + "/.wantrain.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const std::string holder = "host node07 pid 4242\n";
  ASSERT_EQ(::write(fd, holder.data(), holder.size()), ssize_t(holder.size()));
  std::ofstream(dir + "/step-00000003.h5.tmp") << "the other job's write in progress";
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1}\n";

  // --resume auto, as srun-wantrain passes it: the refusal must not leave
  // the other rank waiting for the resume choice.
  const Job second = train(2, dir, "--steps 2 --batch-size 2 --resume auto");
  EXPECT_EQ(second.status, 2) << second.output;
  EXPECT_EQ(occurrences(second.output, "error: option --output-dir: " + dir +
                                           " is in use by another job (host node07 pid 4242); give each job its own "
                                           "output directory"),
            1u)
      << second.output;
  EXPECT_TRUE(fs::exists(dir + "/step-00000003.h5.tmp"));
  std::ifstream metrics(dir + "/metrics.jsonl");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(metrics), {}), "{\"step\":1}\n");

  ::close(fd);  // the holder is gone: its lock file stays, and is taken over
  const Job third = train(2, dir, "--steps 2 --batch-size 2");
  EXPECT_EQ(third.status, 0) << third.output;
}

// Rank 0 cannot make the output directory while --resume auto waits for its
// choice on the other ranks: one line and status 2 at once, not a hang.
TEST_F(Checkpoints, AnOutputDirectoryThatCannotBeMadeIsOneLineEvenWithResumeAuto) {
  const Job job = train(2, "/proc/wantrain-none/run", "--steps 2 --batch-size 2 --resume auto");
  EXPECT_EQ(job.status, 2) << job.output;
  EXPECT_EQ(occurrences(job.output, "error: option --output-dir: cannot create /proc/wantrain-none/run: "), 1u)
      << job.output;
}

// 2 ranks, 16 steps; one run straight through, one stopped after step 7's
// checkpoint (the later files removed, as if it had died) and resumed.
TEST_F(Checkpoints, ResumeMidEpochRepeatsTheUninterruptedRunBitForBit) {
  const std::string options =
      "--steps 16 --batch-size 2 --schedule cosine --warmup-steps 3 --ema-decay 0.9 --text-drop 0.3 ";
  const auto straight = fresh("ckpt-straight"), stopped = fresh("ckpt-stopped");
  const Job a = train(2, straight, options);
  ASSERT_EQ(a.status, 0) << a.output;
  const Job b = train(2, stopped, options + "--save-every 7 --keep 5");
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(wt::ckpt::list_checkpoints(stopped),
            (std::vector<std::string>{stopped + "/step-00000007.h5", stopped + "/step-00000014.h5",
                                      stopped + "/step-00000016.h5"}));
  fs::remove(stopped + "/step-00000014.h5");
  fs::remove(stopped + "/step-00000016.h5");
  fs::remove(stopped + "/model.safetensors");
  fs::remove(stopped + "/ema.safetensors");
  const auto saved = wt::ckpt::read_checkpoint(stopped + "/step-00000007.h5");
  EXPECT_EQ(saved.state.step, 7);
  EXPECT_EQ(saved.state.sampler_consumed, 28);  // 7 of the epoch's 10 global batches of 4
  EXPECT_EQ(saved.world_size, 2);

  const Job resumed = train(2, stopped, options + "--resume " + stopped + "/step-00000007.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(
      occurrences(resumed.output, "resume: " + stopped + "/step-00000007.h5 (step 7, epoch 0, written by 2 ranks)"), 1u)
      << resumed.output;

  const auto reference = training_lines(straight), lines = training_lines(stopped);
  ASSERT_EQ(reference.size(), 16u);
  ASSERT_EQ(lines.size(), 16u);  // 1..7 kept from the first run, 8..16 from the resumed one
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], i + 1);
    EXPECT_EQ(lines[i]["loss"].get<double>(), reference[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(lines[i]["grad_norm"].get<double>(), reference[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(lines[i]["lr"].get<double>(), reference[i]["lr"].get<double>()) << "step " << i + 1;
  }
  EXPECT_EQ(weights_difference(stopped + "/model.safetensors", straight + "/model.safetensors"), 0);
  EXPECT_EQ(weights_difference(stopped + "/ema.safetensors", straight + "/ema.safetensors"), 0);
}

// A 2-rank checkpoint resumed on 1 rank with twice the batch: the same
// global batches, so the trace continues within the invariance tolerance.
TEST_F(Checkpoints, ResumingOnAnotherWorldSizeRepartitionsTheData) {
  const auto straight = fresh("ckpt-ws-straight"), moved = fresh("ckpt-ws-moved");
  const Job a = train(2, straight, "--steps 12 --batch-size 2");
  ASSERT_EQ(a.status, 0) << a.output;
  const Job b = train(2, moved, "--steps 12 --batch-size 2 --save-every 5");
  ASSERT_EQ(b.status, 0) << b.output;
  const Job resumed = train(1, moved, "--steps 12 --batch-size 4 --resume " + moved + "/step-00000005.h5");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("written by 2 ranks; the sampler re-partitions its position"), std::string::npos)
      << resumed.output;
  const auto reference = training_lines(straight), lines = training_lines(moved);
  ASSERT_EQ(lines.size(), 12u);
  for (size_t i = 5; i < lines.size(); ++i)
    EXPECT_LT(relative(lines[i]["loss"], reference[i]["loss"]), 1e-5) << "step " << i + 1;
  EXPECT_LT(weights_difference(moved + "/model.safetensors", straight + "/model.safetensors"), 1e-5);

  // With shard affinity the order depends on the world size: refused mid-epoch.
  const auto affine = fresh("ckpt-ws-affine");
  const Job first = train(2, affine, "--steps 3 --batch-size 2 --shard-affinity");
  ASSERT_EQ(first.status, 0) << first.output;
  const Job other = train(1, affine, "--steps 5 --batch-size 4 --shard-affinity --resume " + affine + "/latest");
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_EQ(occurrences(other.output,
                        "written mid-epoch by 2 ranks with shard affinity, whose data order depends "
                        "on both; resume it on 2 ranks with shard affinity"),
            1u)
      << other.output;

  // A global batch that does not divide the samples consumed cannot continue the epoch.
  const Job odd = train(1, moved, "--steps 12 --batch-size 3 --resume " + moved + "/step-00000005.h5");
  EXPECT_EQ(odd.status, 2) << odd.output;
  EXPECT_EQ(occurrences(odd.output,
                        "it stopped 20 samples into epoch 0, not a whole number of this run's global "
                        "batches of 3"),
            1u)
      << odd.output;
}

TEST_F(Checkpoints, AutoResumeStartsFreshWithoutACheckpointAndContinuesWithOne) {
  const auto dir = fresh("ckpt-auto");
  const Job first = train(2, dir, "--steps 4 --batch-size 2 --resume auto");
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_EQ(occurrences(first.output, "resume: auto: no checkpoint in " + dir + "; starting fresh"), 1u)
      << first.output;
  EXPECT_EQ(wt::ckpt::linked_checkpoint(dir, "latest"), dir + "/step-00000004.h5");  // the final checkpoint

  const Job second = train(2, dir, "--steps 6 --batch-size 2 --resume auto");
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_EQ(occurrences(second.output, "resume: " + dir + "/step-00000004.h5 (step 4"), 1u) << second.output;
  EXPECT_EQ(training_lines(dir).size(), 6u);
  EXPECT_EQ(wt::ckpt::linked_checkpoint(dir, "latest"), dir + "/step-00000006.h5");
}

TEST_F(Checkpoints, BadCheckpointsAreOneLineAndStatus2AndNothingIsOverwritten) {
  const auto dir = fresh("ckpt-bad");
  const Job good = train(2, dir, "--steps 2 --batch-size 2 --ema-decay 0.9");
  ASSERT_EQ(good.status, 0) << good.output;
  const auto checkpoint = dir + "/step-00000002.h5";
  const auto before = fs::last_write_time(checkpoint);

  // Another model: wan-tiny with 3 layers.
  const auto other_config = dir + "/other.json";
  {
    std::ifstream in(tiny_config());
    auto config = nlohmann::json::parse(in);
    config["num_layers"] = 3;
    std::ofstream(other_config) << config.dump();
  }
  fs::copy_file(checkpoint, dir + "/cut.h5");
  fs::resize_file(dir + "/cut.h5", fs::file_size(checkpoint) / 2);

  const Job no_ema = train(2, dir + "-no-ema", "--steps 2 --batch-size 2");
  ASSERT_EQ(no_ema.status, 0) << no_ema.output;

  const struct {
    std::string options, model_config, line;
  } cases[] = {
      {"--resume " + checkpoint, other_config,
       "checkpoint " + checkpoint + ": written for another model than --model-config " + other_config +
           ": num_layers is 2 there, 3 here"},
      {"--resume " + dir + "/cut.h5", tiny_config(), "checkpoint " + dir + "/cut.h5: "},
      {"--resume " + dir + "/absent.h5", tiny_config(), "error: option --resume: " + dir + "/absent.h5 does not exist"},
      {"--resume " + dir + "-no-ema/step-00000002.h5 --ema-decay 0.9", tiny_config(),
       "checkpoint " + dir + "-no-ema/step-00000002.h5: has no /ema, but this run keeps an EMA"},
      {"--resume " + checkpoint, tiny_config(), ""},  // fine: an EMA in the file that this run does not keep
  };
  for (const auto& c : cases) {
    const Job job = train(2, dir, "--steps 3 --batch-size 2 " + c.options, c.model_config);
    if (c.line.empty()) {
      EXPECT_EQ(job.status, 0) << job.output;
      continue;
    }
    EXPECT_EQ(job.status, 2) << c.options << "\n" << job.output;
    EXPECT_EQ(occurrences(job.output, c.line), 1u) << c.options << "\n" << job.output;
    EXPECT_EQ(fs::last_write_time(checkpoint), before);
  }
}

TEST_F(Checkpoints, AFailedWriteStopsOrWarnsPerOptionAndKeepsThePreviousCheckpoint) {
  for (const std::string mode : {"fail", "warn"}) {
    const auto dir = fresh("ckpt-write-" + mode);
    fs::create_directories(dir + "/step-00000004.h5/occupied");  // the step-4 checkpoint cannot be renamed into place
    // Saves at steps 2 and 4 (which fails), and at the end, step 5, unless the failure stopped the run.
    const Job job = train(2, dir, "--steps 5 --batch-size 2 --save-every 2 --on-ckpt-error " + mode);
    EXPECT_EQ(occurrences(job.output, "checkpoint " + dir + "/step-00000004.h5: cannot rename"), 1u) << job.output;
    EXPECT_TRUE(wt::ckpt::read_checkpoint(dir + "/step-00000002.h5").state.step == 2);
    if (mode == "fail") {
      EXPECT_EQ(job.status, 1) << job.output;
      EXPECT_EQ(wt::ckpt::linked_checkpoint(dir, "latest"), dir + "/step-00000002.h5");
    } else {
      EXPECT_EQ(job.status, 0) << job.output;
      EXPECT_EQ(wt::ckpt::linked_checkpoint(dir, "latest"), dir + "/step-00000005.h5");
    }
  }
}

// SIGTERM to one rank: both ranks agree at the next step boundary, rank 0
// writes that step's checkpoint, and the job ends with the requeue status;
// --resume auto then finishes the run.
TEST_F(Checkpoints, SigtermToOneRankCheckpointsAndExitsWithTheRequeueStatus) {
  const auto dir = fresh("ckpt-signal");
  // exec: mpiexec replaces the shell, so its children are the ranks.
  const std::string line = "exec " + command(2, dir, "--steps 100000 --batch-size 2") + " > " + dir + ".log 2>&1";
  const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
  pid_t job = 0;
  ASSERT_EQ(posix_spawn(&job, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);

  // Wait for a few logged steps: the handlers are installed by then.
  const auto start = std::chrono::steady_clock::now();
  while (training_lines(dir).size() < 3 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto ranks = children_of(job);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(kill(ranks.back(), SIGTERM), 0);

  int raw = 0;
  ASSERT_EQ(waitpid(job, &raw, 0), job);
  std::ifstream log_file(dir + ".log");
  const std::string output((std::istreambuf_iterator<char>(log_file)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(raw)) << output;
  EXPECT_EQ(WEXITSTATUS(raw), 75) << output;

  const auto latest = wt::ckpt::linked_checkpoint(dir, "latest");
  ASSERT_TRUE(latest.has_value()) << output;
  const auto saved = wt::ckpt::read_checkpoint(*latest);
  EXPECT_EQ(occurrences(output, "stopping at step " + std::to_string(saved.state.step) + " on SIGTERM: checkpoint " +
                                    *latest + "; exit status 75"),
            1u)
      << output;
  EXPECT_GE(saved.state.step, 3);

  const Job finish = train(2, dir, "--steps " + std::to_string(saved.state.step + 2) + " --batch-size 2 --resume auto");
  EXPECT_EQ(finish.status, 0) << finish.output;
  EXPECT_EQ(training_lines(dir).back()["step"], saved.state.step + 2);
}

// The process killed (SIGKILL, no handler runs) while the writer has a
// .tmp on disk: `latest` still names a complete, loadable checkpoint, and
// --resume auto continues from it, removing the partial file.
TEST_F(Checkpoints, AKillDuringTheWriteLeavesThePreviousLatestLoadable) {
  const auto dir = fresh("ckpt-kill");
  fs::create_directories(dir);
  // A model big enough that a write takes a while (about 64 MB a checkpoint).
  const auto config_path = dir + "/wider.json";
  {
    std::ifstream in(tiny_config());
    auto config = nlohmann::json::parse(in);
    config["dim"] = 256;
    config["ffn_dim"] = 1024;
    config["num_layers"] = 4;
    std::ofstream(config_path) << config.dump();
  }
  const std::string line = std::string("exec ") + WANTRAIN_WANTRAIN + " --model-config " + config_path + " --data " +
                           data_ + " --output-dir " + dir + " --threads 1 --batch-size 1 --steps 100000 " +
                           "--save-every 1 --ema-decay 0.9 > " + dir + ".log 2>&1";
  const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
  pid_t job = 0;
  ASSERT_EQ(posix_spawn(&job, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);

  auto partial = [&]() -> std::string {
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".tmp" && entry.path().filename().string().rfind("step-", 0) == 0)
        return entry.path().string();
    return "";
  };
  const auto start = std::chrono::steady_clock::now();
  std::string tmp;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(90)) {
    if (wt::ckpt::linked_checkpoint(dir, "latest") && !(tmp = partial()).empty()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(job, SIGKILL);
  int raw = 0;
  waitpid(job, &raw, 0);
  ASSERT_FALSE(tmp.empty()) << "no write in flight was seen";
  const std::string left = partial();  // normally tmp; empty if the write finished before the kill landed
  const auto latest = wt::ckpt::linked_checkpoint(dir, "latest");
  ASSERT_TRUE(latest.has_value());
  const auto saved = wt::ckpt::read_checkpoint(*latest);  // complete and loadable
  EXPECT_GE(saved.state.step, 1);
  EXPECT_FALSE(saved.model.empty());

  const Job resumed = launch(std::string(WANTRAIN_WANTRAIN) + " --model-config " + config_path + " --data " + data_ +
                             " --output-dir " + dir + " --threads 1 --batch-size 1 --ema-decay 0.9 --steps " +
                             std::to_string(saved.state.step + 1) + " --resume auto");
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  if (!left.empty()) {
    EXPECT_EQ(occurrences(resumed.output, "removed " + left + ", left by a checkpoint write that did not finish"), 1u)
        << resumed.output;
  }
  EXPECT_TRUE(partial().empty());
  EXPECT_EQ(occurrences(resumed.output, "resume: " + *latest), 1u) << resumed.output;
}

// export: the final checkpoint's weights and EMA are the run's safetensors,
// under official names; diffusers names load back through the model reader.
TEST_F(Checkpoints, ExportWritesTheCheckpointsWeightsAsSafetensors) {
  const auto dir = fresh("ckpt-export");
  const Job run = train(2, dir, "--steps 3 --batch-size 2 --ema-decay 0.9");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string export_command = std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/latest";
  for (const std::string which : {"model", "ema"}) {
    const Job exported = launch(export_command + " --out " + dir + "/exported-" + which + ".safetensors" +
                                (which == "ema" ? " --ema" : ""));
    ASSERT_EQ(exported.status, 0) << exported.output;
    EXPECT_EQ(weights_difference(dir + "/exported-" + which + ".safetensors", dir + "/" + which + ".safetensors"), 0)
        << which;
  }
  const Job diffusers = launch(export_command + " --names diffusers --dtype bf16 --out " + dir + "/d.safetensors");
  ASSERT_EQ(diffusers.status, 0) << diffusers.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/d.safetensors");
  EXPECT_NE(file.find("patch_embedding.weight"), nullptr);  // the one name both conventions share
  EXPECT_EQ(file.find("blocks.0.self_attn.q.weight"), nullptr);
  EXPECT_NE(file.find("blocks.0.attn1.to_q.weight"), nullptr);
  const Job missing = launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir + "/nope.h5 --out " + dir +
                             "/x.safetensors");
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_EQ(occurrences(missing.output, "error: checkpoint " + dir + "/nope.h5: no such file"), 1u) << missing.output;
}

}  // namespace

namespace {

// wanbench ckpt runs and reports the figures docs/performance.md quotes;
// a checkpoint with EMA holds 16 bytes per parameter.
TEST(WanbenchCkpt, ReportsSizeSaveTimesAndStall) {
  const Job job = launch(std::string(WANTRAIN_WANBENCH) + " ckpt --model-config " + tiny_config() +
                         " --steps 2 --rounds 1 --threads 1 --json");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto report = Json::parse(job.output.substr(job.output.find('{')));
  std::ifstream in(tiny_config());
  const auto config = wt::wan::parse_model_config(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), tiny_config());
  EXPECT_EQ(report["tensor_bytes"].get<int64_t>(), 16 * wt::wan::parameter_count(config));
  EXPECT_GT(report["checkpoint_bytes"].get<int64_t>(), report["tensor_bytes"].get<int64_t>());
  for (const char* key :
       {"sync_save_s", "snapshot_s", "file_write_s", "plain_write_s", "steps_s", "steps_with_background_write_s"})
    EXPECT_GT(report[key].get<double>(), 0) << key;
  EXPECT_LT(report["snapshot_s"].get<double>(), report["sync_save_s"].get<double>());
}

}  // namespace

namespace {

// tests/fixtures/checkpoint-v1: a version-1 file written by an earlier
// wantrain (2 ranks, step 2 of its data, mid-epoch, with EMA and AdamW
// state) resumes, and the version-2 files written after it continue the
// same run bit for bit.
TEST(CheckpointFormat, AVersion1CheckpointResumes) {
  const std::string fixture = std::string(WANTRAIN_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1";
  const std::string data = fresh("ckpt-v1-data"), dir = fresh("ckpt-v1-run");
  // The fixture's dataset, made again (wandata synth is deterministic; the README says how).
  const Job synth = launch(std::string(WANTRAIN_WANDATA) + " synth --out " + data +
                           " --samples 16 --shards 2 --size 8x8 --text-len 8 --text-dim 16");
  ASSERT_EQ(synth.status, 0) << synth.output;
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture + "/step-00000002.h5", dir + "/step-00000002.h5");
  const auto run = [&](const std::string& resume, int steps) {
    return launch(mpi_command(2, WANTRAIN_WANTRAIN,
                              "--model-config " + fixture + "/model-config.json --data " + data + " --output-dir " +
                                  dir +
                                  " --batch-size 2 --ema-decay 0.9 --threads 1 --seed 3 --log-every 1 "
                                  "--save-every 1 --keep 0 --resume " +
                                  resume + " --steps " + std::to_string(steps)));
  };
  const Job from_v1 = run(dir + "/step-00000002.h5", 4);
  ASSERT_EQ(from_v1.status, 0) << from_v1.output;
  EXPECT_EQ(occurrences(from_v1.output, "resume: " + dir + "/step-00000002.h5 (step 2, epoch 0, written by 2 ranks)"),
            1u)
      << from_v1.output;
  const auto first = training_lines(dir);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]["step"], 3);
  std::filesystem::copy_file(dir + "/model.safetensors", dir + "/from-v1.safetensors");

  // Step 4 again, from the version-2 file of step 3 that the resumed run wrote.
  std::filesystem::remove(dir + "/metrics.jsonl");
  const Job from_v2 = run(dir + "/step-00000003.h5", 4);
  ASSERT_EQ(from_v2.status, 0) << from_v2.output;
  const auto again = training_lines(dir);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["loss"].get<double>(), first[1]["loss"].get<double>());
  EXPECT_EQ(weights_difference(dir + "/model.safetensors", dir + "/from-v1.safetensors"), 0.0);
}

}  // namespace
