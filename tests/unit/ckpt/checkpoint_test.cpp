// The checkpoint file (lib/ckpt/checkpoint) and the directory it lives in
// (writer, links, pruning): round trips and each bad file's error.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "../../common/build_paths.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/shard_file.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/ckpt/writer.hpp"
#include "wantrain/util/error.hpp"

namespace {

wt::ckpt::WriterOptions writer_options(const std::string& dir, int keep, bool keep_best) {
  wt::ckpt::WriterOptions options;
  options.directory = dir;
  options.keep = keep;
  options.keep_best = keep_best;
  return options;
}

namespace fs = std::filesystem;
using namespace wt::ckpt;

std::string fresh_dir(const std::string& name) {
  const auto dir = fs::path(::testing::TempDir()) / ("ckpt-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// A small but complete checkpoint: two parameters (one 0-d), EMA, AdamW state.
Checkpoint sample(int64_t step, double val_loss = NAN) {
  torch::manual_seed(step);
  Checkpoint c;
  c.model = {{"blocks.0.norm3.weight", torch::randn({8})},
             {"head.modulation", torch::randn({1, 2, 8})},
             {"scalar", torch::randn({})}};
  for (const auto& [name, t] : c.model) {
    c.ema.emplace_back(name, t * 0.5);
    c.optim.push_back({name, step, torch::randn(t.sizes()), torch::rand(t.sizes())});
  }
  c.state = {step, 2, 3, 48, 1, 1e-4, 1024.0, 7, val_loss};
  c.rng_cpu = torch::arange(0, 200, torch::kUInt8);
  c.run_config = R"({"lr":"0.0001"})";
  c.model_config = R"({"dim":8})";
  c.world_size = 2;
  c.shard_affinity = true;
  c.objective_kind = "distillation";
  c.objective = {{"teacher", "t.safetensors"}, {"teacher_checksum", "crc32:0000abcd"}};
  return c;
}

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, at::Tensor> by_name(b.begin(), b.end());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, by_name[name])) << name;
  }
}

// `whole` split into ZeRO shard files: each tensor's flattened elements cut
// at `cuts` (element offsets where rank r's slice starts, r >= 1), the main
// file at dir/step-N.h5 beside them; the shard parts, for tampering.
std::vector<ShardPart> write_sharded(const std::string& dir, const Checkpoint& whole, std::vector<int64_t> cuts) {
  const int ranks = int(cuts.size()) + 1;
  std::vector<ShardPart> parts(ranks);
  for (int r = 0; r < ranks; ++r) parts[r] = {r, ranks, {}};
  for (size_t i = 0; i < whole.model.size(); ++i) {
    const auto& [name, t] = whole.model[i];
    for (int r = 0; r < ranks; ++r) {
      const int64_t begin = std::min(r == 0 ? 0 : cuts[r - 1], t.numel());
      const int64_t end = std::min(r == ranks - 1 ? t.numel() : cuts[r], t.numel());
      if (begin >= end) continue;
      auto cut = [&](const at::Tensor& x) { return x.flatten().narrow(0, begin, end - begin).clone(); };
      parts[r].slices.push_back({name, begin, t.numel(), whole.optim[i].step, cut(whole.optim[i].exp_avg),
                                 cut(whole.optim[i].exp_avg_sq), cut(whole.ema[i].second)});
    }
  }
  Checkpoint main = whole;
  main.shard = parts[0];
  main.sharded_ema = true;
  write_checkpoint(dir + "/" + checkpoint_file_name(whole.state.step), main);
  for (const auto& part : parts)
    write_shard(dir + "/" + shard_file_name(whole.state.step, part.rank, ranks), part, whole.state.step);
  return parts;
}

// A sharded checkpoint reads back whole (its AdamW state and EMA gathered
// from the shard files), and a StateReader reads any range of it across
// the shards' boundaries.
TEST(ShardedCheckpoint, ReadsBackWholeAndByRangesAcrossShards) {
  const auto dir = fresh_dir("sharded");
  const auto c = sample(9);
  write_sharded(dir, c, {5, 12});  // rank 0: elements 0-4 of each tensor, rank 1: 5-11, rank 2: 12-
  const auto back = read_checkpoint(dir + "/step-00000009.h5");
  EXPECT_EQ(back.version, kShardedVersion);
  EXPECT_EQ(back.shard.ranks, 3);
  expect_same(back.model, c.model);
  expect_same(back.ema, c.ema);
  ASSERT_EQ(back.optim.size(), c.optim.size());
  for (size_t i = 0; i < c.optim.size(); ++i) {
    EXPECT_EQ(back.optim[i].name, c.optim[i].name);
    EXPECT_EQ(back.optim[i].step, 9);
    EXPECT_TRUE(torch::equal(back.optim[i].exp_avg, c.optim[i].exp_avg)) << c.optim[i].name;
    EXPECT_TRUE(torch::equal(back.optim[i].exp_avg_sq, c.optim[i].exp_avg_sq)) << c.optim[i].name;
  }
  // Without the state: the main file alone.
  const auto main_only = read_checkpoint(dir + "/step-00000009.h5", {false, false});
  EXPECT_TRUE(main_only.optim.empty());
  EXPECT_TRUE(main_only.ema.empty());
  const StateReader reader(dir + "/step-00000009.h5");
  using Kind = StateReader::Kind;
  const auto& modulation = c.optim[1].exp_avg;  // [1, 2, 8], rank 0: 0-4, rank 1: 5-11, rank 2: 12-15
  EXPECT_TRUE(torch::equal(reader.read(Kind::ExpAvg, "head.modulation", 3, 11), modulation.flatten().narrow(0, 3, 11)));
  // An unsharded checkpoint reads by ranges alike.
  write_checkpoint(dir + "/whole.h5", c);
  const StateReader whole(dir + "/whole.h5");
  EXPECT_TRUE(torch::equal(whole.read(Kind::Ema, "head.modulation", 6, 4), c.ema[1].second.flatten().narrow(0, 6, 4)));
  const std::vector<std::pair<std::string, int64_t>> numels = {
      {"blocks.0.norm3.weight", 8}, {"head.modulation", 16}, {"scalar", 1}};
  EXPECT_NO_THROW(whole.check(numels, numels));
  // Ranges that start and end inside rows of a matrix, and a scalar.
  Checkpoint matrix = c;
  matrix.model = {{"w", torch::randn({5, 3})}, {"s", torch::randn({})}};
  matrix.ema = {{"w", torch::randn({5, 3})}, {"s", torch::randn({})}};
  matrix.optim = {{"w", 9, torch::randn({5, 3}), torch::rand({5, 3})}, {"s", 9, torch::randn({}), torch::rand({})}};
  write_checkpoint(dir + "/matrix.h5", matrix);
  const StateReader rows(dir + "/matrix.h5");
  for (auto [begin, count] : {std::pair<int64_t, int64_t>{4, 7}, {0, 15}, {14, 1}, {3, 3}})
    EXPECT_TRUE(torch::equal(rows.read(Kind::ExpAvgSq, "w", begin, count),
                             matrix.optim[0].exp_avg_sq.flatten().narrow(0, begin, count)))
        << begin << "+" << count;
  EXPECT_TRUE(torch::equal(rows.read(Kind::Ema, "s", 0, 1), matrix.ema[1].second.reshape({1})));
}

// Slices that leave a gap, a parameter of another size, and a shard file
// that is missing are each one line naming the file and tensor.
TEST(ShardedCheckpoint, GapsSizesAndMissingShardsAreNamed) {
  const auto dir = fresh_dir("sharded-bad");
  const auto c = sample(4);
  auto parts = write_sharded(dir, c, {5});
  const std::string path = dir + "/step-00000004.h5";
  const std::vector<std::pair<std::string, int64_t>> sizes = {
      {"blocks.0.norm3.weight", 8}, {"head.modulation", 16}, {"scalar", 1}};
  EXPECT_NO_THROW(StateReader(path).check(sizes, sizes));
  auto other_sizes = sizes;
  other_sizes[1].second = 17;
  EXPECT_NE(message_of([&] {
              StateReader(path).check(other_sizes, other_sizes);
            }).find("optimizer exp_avg of head.modulation has 16 elements, the model's parameter 17"),
            std::string::npos);
  // Rank 1's slice of head.modulation moved one element on: a gap at 5.
  for (auto& slice : parts[1].slices)
    if (slice.name == "head.modulation") {
      slice.offset = 6;
      slice.exp_avg = slice.exp_avg.narrow(0, 0, 10);
      slice.exp_avg_sq = slice.exp_avg_sq.narrow(0, 0, 10);
      slice.ema = slice.ema.narrow(0, 0, 10);
    }
  write_shard(dir + "/" + shard_file_name(4, 1, 2), parts[1], 4);
  EXPECT_EQ(message_of([&] { StateReader(path).check(sizes, sizes); }),
            "checkpoint " + path +
                ": optimizer exp_avg of head.modulation: the slices leave a gap before element 6 "
                "(at /optimizer/head.modulation/exp_avg in " +
                dir + "/step-00000004.zero-1-of-2.h5)");
  fs::remove(dir + "/" + shard_file_name(4, 1, 2));
  EXPECT_EQ(message_of([&] { read_checkpoint(path); }),
            "checkpoint " + dir + "/step-00000004.zero-1-of-2.h5: the file: is missing");
}

TEST(Checkpoint, RoundTripKeepsEveryTensorAndField) {
  const auto dir = fresh_dir("round-trip");
  const auto saved = sample(12, 0.25);
  write_checkpoint(dir + "/c.h5", saved);
  const auto back = read_checkpoint(dir + "/c.h5");
  expect_same(saved.model, back.model);
  expect_same(saved.ema, back.ema);
  ASSERT_EQ(back.optim.size(), saved.optim.size());
  for (const auto& slot : saved.optim) {
    const auto it = std::find_if(back.optim.begin(), back.optim.end(), [&](auto& s) { return s.name == slot.name; });
    ASSERT_NE(it, back.optim.end()) << slot.name;
    EXPECT_EQ(it->step, slot.step);
    EXPECT_TRUE(torch::equal(it->exp_avg, slot.exp_avg)) << slot.name;
    EXPECT_TRUE(torch::equal(it->exp_avg_sq, slot.exp_avg_sq)) << slot.name;
  }
  EXPECT_EQ(back.state.step, 12);
  EXPECT_EQ(back.state.epoch, 2);
  EXPECT_EQ(back.state.sampler_epoch, 3);
  EXPECT_EQ(back.state.sampler_consumed, 48);
  EXPECT_EQ(back.state.skipped, 1);
  EXPECT_EQ(back.state.lr, 1e-4);
  EXPECT_EQ(back.state.loss_scale, 1024.0);
  EXPECT_EQ(back.state.loss_scale_good_steps, 7);
  EXPECT_EQ(back.state.val_loss, 0.25);
  EXPECT_TRUE(torch::equal(back.rng_cpu, saved.rng_cpu));
  EXPECT_EQ(back.run_config, saved.run_config);
  EXPECT_EQ(back.model_config, saved.model_config);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_TRUE(back.shard_affinity);
  EXPECT_EQ(back.objective_kind, "distillation");
  EXPECT_EQ(back.objective, saved.objective);
  EXPECT_EQ(back.version, kVersion);
  EXPECT_EQ(back.model[0].second.dim(), saved.model[0].second.dim());
}

// Version 2: one group per component, each with its typed attributes.
TEST(Checkpoint, Version2HasOneGroupPerComponent) {
  const auto dir = fresh_dir("groups");
  write_checkpoint(dir + "/c.h5", sample(5));
  const hid_t file = H5Fopen((dir + "/c.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const char* group : {"/engine", "/engine/scaler", "/model", "/ema", "/optimizer", "/sampler", "/objective"})
    EXPECT_GT(H5Lexists(file, group, H5P_DEFAULT), 0) << group;
  for (const char* old : {"/trainer", "/optim"}) EXPECT_EQ(H5Lexists(file, old, H5P_DEFAULT), 0) << old;
  for (const auto& [object, attribute] :
       {std::pair{"/sampler", "world_size"}, std::pair{"/sampler", "shard_affinity"}, std::pair{"/engine", "step"},
        std::pair{"/optimizer", "kind"}, std::pair{"/objective", "teacher_checksum"}})
    EXPECT_GT(H5Aexists_by_name(file, object, attribute, H5P_DEFAULT), 0) << object << " " << attribute;
  H5Fclose(file);
}

// tests/fixtures/checkpoint-v1 (written by wantrain before version 2) reads
// into the same fields, the shard affinity and teacher from where version 1
// kept them.
TEST(Checkpoint, Version1FilesAreRead) {
  const auto c = read_checkpoint(std::string(WANTRAIN_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1/step-00000002.h5");
  EXPECT_EQ(c.version, 1);
  EXPECT_EQ(c.state.step, 2);
  EXPECT_EQ(c.state.sampler_consumed, 8);  // 2 steps of 2 ranks x batch 2
  EXPECT_EQ(c.world_size, 2);
  EXPECT_FALSE(c.shard_affinity);
  EXPECT_EQ(c.objective_kind, "flow-matching");
  EXPECT_TRUE(c.objective.empty());
  EXPECT_EQ(c.model.size(), c.ema.size());
  ASSERT_EQ(c.model.size(), c.optim.size());
  for (const auto& slot : c.optim) EXPECT_EQ(slot.step, 2) << slot.name;
  EXPECT_EQ(
      read_trainer_state(std::string(WANTRAIN_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1/step-00000002.h5").step, 2);
}

TEST(Checkpoint, TruncatedOrForeignFilesAreOneLineNamingTheFile) {
  const auto dir = fresh_dir("bad-files");
  write_checkpoint(dir + "/c.h5", sample(3));
  const auto size = fs::file_size(dir + "/c.h5");
  fs::copy_file(dir + "/c.h5", dir + "/cut.h5");
  fs::resize_file(dir + "/cut.h5", size / 2);
  const auto cut = message_of([&] { read_checkpoint(dir + "/cut.h5"); });
  EXPECT_NE(cut.find("checkpoint " + dir + "/cut.h5: "), std::string::npos) << cut;
  EXPECT_EQ(cut.find('\n'), std::string::npos) << cut;

  std::ofstream(dir + "/text.h5") << "not hdf5\n";
  const auto text = message_of([&] { read_checkpoint(dir + "/text.h5"); });
  EXPECT_NE(text.find("checkpoint " + dir + "/text.h5: not a readable HDF5 file"), std::string::npos) << text;

  // An HDF5 file of another kind: its format attribute says so.
  {
    const hid_t file = H5Fcreate((dir + "/other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(file);
  }
  const auto other = message_of([&] { read_checkpoint(dir + "/other.h5"); });
  EXPECT_NE(other.find("checkpoint " + dir + "/other.h5: attribute format:"), std::string::npos) << other;
}

TEST(Checkpoint, AMissingTensorIsNamed) {
  const auto dir = fresh_dir("missing");
  const auto saved = sample(3);
  write_checkpoint(dir + "/c.h5", saved);
  {
    const hid_t file = H5Fopen((dir + "/c.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(file, "/model/head.modulation", H5P_DEFAULT), 0);
    H5Fclose(file);
  }
  const auto back = read_checkpoint(dir + "/c.h5");
  const auto error = message_of([&] { check_fits(back, dir + "/c.h5", saved.model, saved.model); });
  EXPECT_EQ(error, "checkpoint " + dir + "/c.h5: tensor /model/head.modulation is missing");
}

TEST(Checkpoint, ShapeMismatchesAndStrangersAreNamed) {
  const auto saved = sample(3);
  NamedTensors model = saved.model;
  model[1].second = torch::zeros({1, 2, 9});
  EXPECT_EQ(message_of([&] { check_fits(saved, "x.h5", model, {}); }),
            "checkpoint x.h5: tensor /model/head.modulation has shape [1,2,8], the model's is [1,2,9]");
  model = saved.model;
  model.pop_back();
  EXPECT_EQ(message_of([&] { check_fits(saved, "x.h5", model, {}); }),
            "checkpoint x.h5: tensor /model/scalar is not a parameter of this model");
  Checkpoint no_ema = saved;
  no_ema.ema.clear();
  EXPECT_EQ(message_of([&] { check_fits(no_ema, "x.h5", saved.model, saved.model); }),
            "checkpoint x.h5: has no /ema, but this run keeps an EMA");
  Checkpoint bad_optim = saved;
  bad_optim.optim[0].exp_avg_sq = torch::zeros({3});
  EXPECT_EQ(message_of([&] { check_fits(bad_optim, "x.h5", saved.model, saved.model); }),
            "checkpoint x.h5: tensor /optimizer/blocks.0.norm3.weight/exp_avg_sq has shape [3], the model's is [8]");
  EXPECT_NO_THROW(check_fits(saved, "x.h5", saved.model, saved.model));
}

TEST(CheckpointWriter, LatestNamesTheNewestAndKeepPrunesOnlyAfterANewOneIsComplete) {
  const auto dir = fresh_dir("writer");
  {
    CheckpointWriter writer(writer_options(dir, 2, false));
    for (int64_t step : {10, 20, 30}) writer.submit(sample(step));
    const auto results = writer.drain();
    ASSERT_EQ(results.size(), 3u);
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.error;
  }
  EXPECT_EQ(list_checkpoints(dir), (std::vector<std::string>{dir + "/step-00000020.h5", dir + "/step-00000030.h5"}));
  EXPECT_EQ(linked_checkpoint(dir, "latest"), dir + "/step-00000030.h5");
  EXPECT_EQ(read_checkpoint(*linked_checkpoint(dir, "latest")).state.step, 30);
  EXPECT_EQ(resolve_resume("auto", dir), dir + "/step-00000030.h5");
  EXPECT_EQ(resolve_resume(dir, "elsewhere"), dir + "/step-00000030.h5");
  EXPECT_EQ(resolve_resume("auto", fresh_dir("empty")), std::nullopt);
  EXPECT_NE(message_of([&] { resolve_resume(dir + "/nothing.h5", dir); }).find("resume: "), std::string::npos);
  // A `latest` naming a missing file is damage, not a fresh start.
  const auto dangling = fresh_dir("dangling");
  fs::create_symlink("step-00000009.h5", dangling + "/latest");
  EXPECT_EQ(message_of([&] { resolve_resume("auto", dangling); }),
            "resume: " + dangling + "/latest names step-00000009.h5, which does not exist");
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().extension(), entry.path().filename() == "latest" ? "" : ".h5") << entry.path();
}

// A run directory damaged by a copy or by hand is one line for --resume,
// never a fresh start over its checkpoints, and its links never lead out of it.
TEST(CheckpointWriter, ADamagedRunDirectoryIsOneLineForResume) {
  const auto dir = fresh_dir("damaged");
  {
    CheckpointWriter writer(writer_options(dir, 0, false));
    for (int64_t step : {10, 20}) writer.submit(sample(step));
    for (const auto& r : writer.drain()) ASSERT_TRUE(r.ok()) << r.error;
  }
  const std::string latest = dir + "/latest";
  auto relink = [&](const std::string& target) {
    fs::remove(latest);
    fs::create_symlink(target, latest);
  };
  // Links to anything but the directory's own checkpoints: not followed.
  const auto other = fresh_dir("damaged-other");
  fs::copy_file(dir + "/step-00000020.h5", other + "/step-00000020.h5");
  for (const std::string& target :
       std::vector<std::string>{"../damaged-other/step-00000020.h5", other + "/step-00000020.h5", "notes.txt"}) {
    relink(target);
    EXPECT_EQ(linked_checkpoint(dir, "latest"), std::nullopt) << target;
    for (const std::string& resume : std::vector<std::string>{"auto", dir})
      EXPECT_EQ(message_of([&] { resolve_resume(resume, resume == "auto" ? dir : "elsewhere"); }),
                "resume: " + latest + " names " + target +
                    ": a run's 'latest' names one of its own checkpoints (step-NNNNNNNN.h5 beside it)")
          << target;
  }
  // A copy that followed links: `latest` a file.
  fs::remove(latest);
  fs::copy_file(dir + "/step-00000020.h5", latest);
  EXPECT_EQ(message_of([&] { resolve_resume("auto", dir); }),
            "resume: " + latest +
                " is not a link to a checkpoint (a copy that followed links, e.g. cp -L or rsync -L?): give the "
                "checkpoint file to resume from");
  // Checkpoints but no `latest` (killed between the rename and the link): not a new run, the newest.
  fs::remove(latest);
  EXPECT_EQ(resolve_resume("auto", dir), dir + "/step-00000020.h5");
  EXPECT_EQ(resolve_resume(dir, "elsewhere"), dir + "/step-00000020.h5");
  // Restored, it resumes.
  relink("step-00000020.h5");
  EXPECT_EQ(resolve_resume("auto", dir), dir + "/step-00000020.h5");
}

TEST(CheckpointWriter, KeepBestKeepsTheLowestValidationLossBeyondKeep) {
  const auto dir = fresh_dir("best");
  CheckpointWriter writer(writer_options(dir, 1, true));
  writer.submit(sample(1, 0.5));
  writer.submit(sample(2, 0.2));
  writer.submit(sample(3, 0.3));
  writer.submit(sample(4, NAN));  // not validated: never best
  for (const auto& r : writer.drain()) EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(linked_checkpoint(dir, "best"), dir + "/step-00000002.h5");
  EXPECT_EQ(linked_checkpoint(dir, "latest"), dir + "/step-00000004.h5");
  EXPECT_EQ(list_checkpoints(dir), (std::vector<std::string>{dir + "/step-00000002.h5", dir + "/step-00000004.h5"}));
}

TEST(CheckpointWriter, AFailedWriteIsReportedAndLeavesThePreviousCheckpointIntact) {
  const auto dir = fresh_dir("fails");
  CheckpointWriter writer(writer_options(dir, 3, false));
  writer.submit(sample(2));
  // The next checkpoint's name is taken by a non-empty directory: the
  // rename fails after the whole file was written (as a full disk would
  // fail the write itself; as root, permissions would not stop us).
  fs::create_directories(dir + "/step-00000004.h5/occupied");
  writer.submit(sample(4));
  const auto results = writer.drain();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok());
  ASSERT_FALSE(results[1].ok());
  EXPECT_NE(results[1].error.find("checkpoint " + dir + "/step-00000004.h5: cannot rename"), std::string::npos)
      << results[1].error;
  EXPECT_FALSE(fs::exists(dir + "/step-00000004.h5.tmp"));
  EXPECT_EQ(linked_checkpoint(dir, "latest"), dir + "/step-00000002.h5");
  EXPECT_EQ(read_checkpoint(dir + "/step-00000002.h5").state.step, 2);
}

// wait_idle is bounded: false while a write is in flight past the bound
// (a slow write, injected through the test hook), true once it finished.
TEST(CheckpointWriter, WaitIdleIsBoundedWhileAWriteIsInFlight) {
  const auto dir = fresh_dir("wait-idle");
  CheckpointWriter writer(writer_options(dir, 3, false));
  EXPECT_TRUE(writer.wait_idle(std::chrono::milliseconds(0)));
  setenv("WANTRAIN_TEST_DELAY", "checkpoint_write:1", 1);
  writer.submit(sample(2));
  EXPECT_FALSE(writer.wait_idle(std::chrono::milliseconds(50)));
  unsetenv("WANTRAIN_TEST_DELAY");
  EXPECT_TRUE(writer.wait_idle(std::chrono::seconds(60)));
  const auto results = writer.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok()) << results[0].error;
}

TEST(CheckpointDirectory, PartialWritesAreRecognisedAndRemoved) {
  const auto dir = fresh_dir("partial");
  write_checkpoint(dir + "/step-00000005.h5.tmp", sample(5));
  std::ofstream(dir + "/notes.txt") << "mine\n";
  EXPECT_TRUE(list_checkpoints(dir).empty());
  EXPECT_EQ(remove_partial_writes(dir), std::vector<std::string>{dir + "/step-00000005.h5.tmp"});
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_EQ(checkpoint_file_name(123), "step-00000123.h5");
  // --keep 0 keeps everything.
  for (int64_t step : {1, 2, 3}) write_checkpoint(dir + "/" + checkpoint_file_name(step), sample(step));
  EXPECT_TRUE(prune(dir, 0).empty());
  EXPECT_EQ(prune(dir, 1), (std::vector<std::string>{dir + "/step-00000001.h5", dir + "/step-00000002.h5"}));
}

}  // namespace
