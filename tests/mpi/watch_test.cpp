// Watching a run: samples drawn during training, TensorBoard event files
// (checked by an independent Python reader), run.json and `wantrain report`,
// `wantrain plot`, and log lines as they reach a file or a terminal.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/train_runs.hpp"

namespace {

namespace fs = std::filesystem;
using wt::testing::fresh;
using wt::testing::Job;
using wt::testing::launch;
using wt::testing::mpi_command;
using wt::testing::occurrences;
using wt::testing::read_text;
using Json = nlohmann::json;
using namespace wt::testing::train_runs;

const std::string kReader =
    std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/report/tfevents_reader.py";

// "2,4,6" for from, from + every, ... up to `last`.
std::string steps(int64_t from, int64_t every, int64_t last) {
  std::string out;
  for (int64_t s = from; s <= last; s += every) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

// Width and height from a PNG's IHDR chunk (bytes 16..23, big-endian).
std::pair<uint32_t, uint32_t> png_size(const std::string& path) {
  const std::string bytes = read_text(path);
  if (bytes.size() < 24 || bytes.compare(1, 3, "PNG") != 0) return {0, 0};
  auto u32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  return {u32(16), u32(20)};
}

Json read_json(const std::string& path) { return Json::parse(read_text(path)); }

std::vector<Json> lines_with(const std::string& dir, const char* key) {
  std::vector<Json> out;
  for (auto& j : read_metrics(dir))
    if (j.contains(key)) out.push_back(j);
  return out;
}

class Watch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = synth_tiny_data("watch-data", 16, 3);
    val_ = synth_tiny_data("watch-val", 8, 4);
  }

  static std::string command(int ranks, const std::string& dir, const std::string& options) {
    return WantrainJob(ranks).data(data_).output(dir).with("--seed 7 --batch-size 2 --lr 2e-3 " + options).command();
  }
  static Job train(int ranks, const std::string& dir, const std::string& options) {
    const Job job = launch(command(ranks, dir, options));
    EXPECT_LT(job.seconds, kHangGuardSeconds);
    return job;
  }

  static std::string data_, val_;
};
std::string Watch::data_, Watch::val_;

// Drawing samples (EMA weights swapped in and out, eval mode, noise of its
// own) leaves every step as it was: the same losses, gradient norms and
// final weights, bit for bit, with and without ZeRO's gathered EMA.
TEST_F(Watch, SamplesDuringTrainingLeaveTheTrajectoryUnchanged) {
  for (const std::string zero : {"0", "1"}) {
    const std::string common = "--steps 12 --log-every 1 --ema-decay 0.9 --text-drop 0.3 --zero " + zero + " ";
    const auto plain = fresh("watch-plain-" + zero), sampled = fresh("watch-sampled-" + zero);
    const Job a = train(2, plain, common);
    const Job b = train(2, sampled, common + "--sample-every 4 --sample-steps 3 --sample-index 5");
    ASSERT_EQ(a.status, 0) << a.output;
    ASSERT_EQ(b.status, 0) << b.output;
    const auto x = training_lines(plain), y = training_lines(sampled);
    ASSERT_EQ(x.size(), 12u);
    ASSERT_EQ(y.size(), 12u);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i]["loss"].get<double>(), y[i]["loss"].get<double>()) << "zero " << zero << " step " << i + 1;
      EXPECT_EQ(x[i]["grad_norm"].get<double>(), y[i]["grad_norm"].get<double>()) << "step " << i + 1;
    }
    EXPECT_EQ(read_text(plain + "/model.safetensors"), read_text(sampled + "/model.safetensors"));
    EXPECT_EQ(read_text(plain + "/ema.safetensors"), read_text(sampled + "/ema.safetensors"));

    const auto samples = lines_with(sampled, "sample_correlation");
    ASSERT_EQ(samples.size(), 3u) << b.output;
    for (size_t i = 0; i < samples.size(); ++i) {
      const int64_t step = 4 * int64_t(i + 1);
      EXPECT_EQ(samples[i]["step"].get<int64_t>(), step);
      EXPECT_EQ(samples[i]["sample_index"].get<int64_t>(), 5);
      const double r = samples[i]["sample_correlation"].get<double>();
      EXPECT_TRUE(r >= -1 && r <= 1) << r;
      EXPECT_GT(samples[i]["sample_s"].get<double>(), 0);
      const std::string png = fmt::format("{}/samples/step-{:08d}.png", sampled, step);
      EXPECT_EQ(samples[i]["sample_png"].get<std::string>(), png);
      // wan-tiny's 16 channels, 4 shown for the sample and 4 for the truth:
      // 8 rows of one 8x8 frame enlarged 4 times, 2-pixel gaps.
      EXPECT_EQ(png_size(png), std::make_pair(uint32_t(1 * (32 + 2) + 2), uint32_t(8 * (32 + 2) + 2))) << png;
    }
    EXPECT_EQ(occurrences(b.output, "sample of training sample 5: correlation"), 3u) << b.output;
  }
}

// The sample drawn after the last step is the one wansample draws from the
// run's EMA weights with the same steps, guidance, shift and seed.
TEST_F(Watch, TheLastSampleIsWhatWansampleDrawsFromTheEmaWeights) {
  const auto dir = fresh("watch-vs-wansample");
  const Job job = train(1, dir, "--steps 10 --ema-decay 0.8 --sample-every 100 --sample-steps 4 --sample-cfg 2");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto samples = lines_with(dir, "sample_correlation");
  ASSERT_EQ(samples.size(), 1u) << "drawn after the last step even when it is no multiple of --sample-every";
  EXPECT_EQ(samples[0]["step"].get<int64_t>(), 10);
  const Job sample = launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/ema.safetensors" +
                            " --model-config " + dir + "/model-config.json --data " + data_ +
                            " --index 0 --steps 4 --cfg 2 --shift 5 --seed 7 --compare --out " + dir + "/ws.h5");
  ASSERT_EQ(sample.status, 0) << sample.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(sample.output, m, std::regex("correlation (-?[0-9.]+), MSE ([0-9.]+)")))
      << sample.output;
  EXPECT_NEAR(samples[0]["sample_correlation"].get<double>(), std::stod(m[1]), 1e-3);
  EXPECT_NEAR(samples[0]["sample_mse"].get<double>(), std::stod(m[2]), 1e-4);
}

// TensorBoard's files hold every scalar at the logged steps, once, across a
// resume from an earlier checkpoint: the old file is cut to the resume
// step and the new one starts with a SessionLog START after it. run.json
// and `wantrain report` say how each start went.
TEST_F(Watch, TensorBoardFilesHoldEveryStepOnceAcrossAResume) {
  const auto dir = fresh("watch-tensorboard");
  const std::string options = "--steps 12 --log-every 2 --val-data " + val_ +
                              " --val-every 6 --save-every 6 --keep 0 --sample-every 6 --sample-steps 2 ";
  const Job first = train(2, dir, options);
  ASSERT_EQ(first.status, 0) << first.output;
  const Job again = train(2, dir, options + "--resume " + dir + "/step-00000006.h5");
  ASSERT_EQ(again.status, 0) << again.output;

  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir + "/tb"))
    files += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(files, 2u) << "one file per start";
  std::string check = kReader + " check " + dir + "/tb --start-steps 1,7 --tags-at-least 15";
  for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "train/samples_per_s", "train/skipped_steps",
                          "time/step_s", "time/data_s", "time/forward_s", "time/backward_s", "time/comm_s",
                          "time/optimizer_s", "memory/peak_rss_mib/rank_0", "memory/peak_rss_mib/rank_1"})
    check += fmt::format(" --scalar {}={}", tag, steps(2, 2, 12));
  check += " --scalar val/loss=6,12 --scalar sample/correlation=6,12 --image sample/preview=6,12";
  const Job read = launch(check);
  EXPECT_EQ(read.status, 0) << check << "\n" << read.output;

  // metrics.jsonl likewise: each logged step once.
  std::vector<int64_t> logged;
  for (const auto& line : training_lines(dir)) logged.push_back(line["step"].get<int64_t>());
  EXPECT_EQ(logged, (std::vector<int64_t>{2, 4, 6, 8, 10, 12}));
  for (const auto& line : training_lines(dir)) {
    ASSERT_TRUE(line.contains("peak_rss_mib_per_rank")) << line.dump();
    EXPECT_EQ(line["peak_rss_mib_per_rank"].size(), 2u);
    for (const auto& mib : line["peak_rss_mib_per_rank"]) EXPECT_GT(mib.get<double>(), 10.0);
  }

  const Json run = read_json(dir + "/run.json");
  EXPECT_EQ(run["exit_status"], 0);
  EXPECT_EQ(run["exit_reason"], "finished");
  EXPECT_EQ(run["first_step"], 6);
  EXPECT_EQ(run["last_step"], 12);
  EXPECT_EQ(run["steps"], 6);
  EXPECT_EQ(run["world"]["ranks"], 2);
  EXPECT_EQ(run["config"]["sample-every"], "6");
  EXPECT_EQ(run["peak_rss_mib_per_rank"].size(), 2u);
  EXPECT_EQ(run["final_val_loss"], lines_with(dir, "val_loss").back()["val_loss"]);
  EXPECT_EQ(run["last_sample"]["step"], 12);
  EXPECT_EQ(run["latest_checkpoint"], dir + "/step-00000012.h5");
  ASSERT_EQ(run["earlier_runs"].size(), 1u);
  EXPECT_EQ(run["earlier_runs"][0]["first_step"], 0);
  EXPECT_EQ(run["earlier_runs"][0]["exit_status"], 0);
  EXPECT_GT(run["samples_per_s"].get<double>(), 0);

  const Job report = launch(std::string(WANTRAIN_WANTRAIN) + " report " + dir);
  EXPECT_EQ(report.status, 0) << report.output;
  for (const std::string& expected : std::vector<std::string>{
           "run " + dir + ": finished (exit status 0)", "world          2 ranks on 1 host",
           "steps          6 -> 12 of 12", "earlier run    steps 0 -> 12: finished (exit status 0)"})
    EXPECT_EQ(occurrences(report.output, expected), 1u) << expected << "\n" << report.output;
  const Job missing = launch(std::string(WANTRAIN_WANTRAIN) + " report " + dir + "/nothing");
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(occurrences(missing.output, "\n"), 1u) << missing.output;
  EXPECT_EQ(occurrences(missing.output, dir + "/nothing/run.json: no such file"), 1u) << missing.output;

  // Without event files when asked.
  const auto quiet = fresh("watch-no-tensorboard");
  ASSERT_EQ(train(1, quiet, "--steps 2 --tensorboard=false").status, 0);
  EXPECT_FALSE(fs::exists(quiet + "/tb"));
}

// wantrain plot: a 1600x1000 PNG of a run's metrics; bad or empty metrics
// are one line and status 2.
TEST_F(Watch, PlotDrawsThePngAndRefusesBadMetricsInOneLine) {
  const auto dir = fresh("watch-plot");
  ASSERT_EQ(train(2, dir, "--steps 6 --log-every 2 --val-data " + val_ + " --val-every 3").status, 0);
  const std::string plot = std::string(WANTRAIN_WANTRAIN) + " plot ";
  const Job drawn = launch(plot + dir + " --log-scale");
  ASSERT_EQ(drawn.status, 0) << drawn.output;
  EXPECT_EQ(png_size(dir + "/plot.png"), std::make_pair(1600u, 1000u));
  const Job elsewhere = launch(plot + dir + " --out " + dir + "/other.png");
  ASSERT_EQ(elsewhere.status, 0) << elsewhere.output;
  EXPECT_EQ(png_size(dir + "/other.png"), std::make_pair(1600u, 1000u));
  // The sample log of --sample-ranks is drawn with the run's.
  fs::create_directories(dir + "/samples");
  std::ofstream(dir + "/samples/metrics.jsonl")
      << "{\"step\": 3, \"sample_correlation\": 0.2, \"sample_mse\": 1.5, \"sample_s\": 0.1}\n"
      << "{\"step\": 6, \"sample_correlation\": 0.4, \"sample_mse\": 1.2, \"sample_s\": 0.1}\n";
  const Job with_samples = launch(plot + dir + " --out " + dir + "/samples.png");
  ASSERT_EQ(with_samples.status, 0) << with_samples.output;
  EXPECT_EQ(occurrences(with_samples.output, ", 2 samples)"), 1u) << with_samples.output;

  auto refused = [&](const std::string& metrics, const std::string& expected) {
    const auto bad = fresh("watch-plot-bad");
    fs::create_directories(bad);
    if (metrics != "none") std::ofstream(bad + "/metrics.jsonl") << metrics;
    const Job job = launch(plot + bad);
    EXPECT_EQ(job.status, 2) << job.output;
    EXPECT_EQ(occurrences(job.output, "\n"), 1u) << job.output;
    EXPECT_EQ(occurrences(job.output, expected), 1u) << job.output;
    EXPECT_FALSE(fs::exists(bad + "/plot.png"));
  };
  refused("", "no training steps logged yet");
  refused("{\"step\": 2, \"val_loss\": 0.5}\n", "no training steps logged yet");
  refused("{\"step\": 2, \"loss\": 0.5, \"step_s\": 0.1}\nnot json\n", "metrics.jsonl:2: not a JSON object");
  refused("{\"step\": 2, \"loss\": \"high\", \"step_s\": 0.1}\n", "field 'loss' is not a number");
  refused("none", "no metrics.jsonl");
  const Job no_dir = launch(plot + dir + "/absent");
  EXPECT_EQ(no_dir.status, 2) << no_dir.output;
  EXPECT_EQ(occurrences(no_dir.output, "\n"), 1u) << no_dir.output;
}

// Every line a run writes into a file has one timestamped, rank-prefixed
// format and no colour codes; on a terminal there are colours (not with
// NO_COLOR) and a progress bar (not under SLURM, whose output goes to files).
TEST_F(Watch, LogLinesArePlainAndTimestampedUnlessAPersonWatchesATerminal) {
  const auto dir = fresh("watch-logs");
  const Job file = train(2, dir, "--steps 4 --log-every 2 --val-data " + val_ + " --val-every 2");
  ASSERT_EQ(file.status, 0) << file.output;
  EXPECT_EQ(file.output.find('\x1b'), std::string::npos) << file.output;
  EXPECT_EQ(file.output.find('\r'), std::string::npos) << file.output;
  const std::regex line_format(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[rank \d/2\] \[(info|warning)\] .*)");
  std::istringstream lines(file.output);
  size_t count = 0;
  for (std::string line; std::getline(lines, line); ++count) EXPECT_TRUE(std::regex_match(line, line_format)) << line;
  EXPECT_GT(count, 20u);

  // A pseudo-terminal through script(1): what a person at a terminal sees.
  // One rank without a launcher; the shell stays its parent (`; exit`), as
  // an interactive shell would be.
  auto on_terminal = [&](const std::string& environment) {
    const std::string inner = "env " + environment + " " + WANTRAIN_WANTRAIN + " --model-config " + tiny_config() +
                              " --data " + data_ + " --output-dir " + fresh("watch-tty") +
                              " --threads 1 --backend mpi --batch-size 2 --steps 30 --log-every 10; exit $?";
    return launch("SHELL=/bin/sh script -qec '" + inner + "' /dev/null");
  };
  const Job tty = on_terminal("");
  ASSERT_EQ(tty.status, 0) << tty.output;
  EXPECT_NE(tty.output.find("\x1b[32m"), std::string::npos) << "colour on a terminal: " << tty.output;
  EXPECT_NE(tty.output.find("\rtrain ["), std::string::npos) << "a progress bar on a terminal: " << tty.output;
  const Job no_color = on_terminal("NO_COLOR=1");
  ASSERT_EQ(no_color.status, 0) << no_color.output;
  EXPECT_EQ(no_color.output.find("\x1b[32m"), std::string::npos) << no_color.output;
  const Job slurm = on_terminal("SLURM_JOB_ID=1");
  ASSERT_EQ(slurm.status, 0) << slurm.output;
  EXPECT_EQ(slurm.output.find("\x1b[32m"), std::string::npos) << slurm.output;
  EXPECT_EQ(slurm.output.find("\rtrain ["), std::string::npos) << slurm.output;
  EXPECT_EQ(occurrences(slurm.output, "step 30/30"), 1u) << "plain step lines instead: " << slurm.output;
}

}  // namespace
