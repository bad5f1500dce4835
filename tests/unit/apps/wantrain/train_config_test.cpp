// wantrain's options: the names fixed by the design, and the checks on values.
#include <gtest/gtest.h>

#include <sstream>
#include <utility>

#include "train_config.hpp"
#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/util/threads.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/options.hpp"

namespace {

std::string validation_error(wt::wantrain::TrainConfig cfg) {
  try {
    wt::wantrain::validate(cfg);
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "valid";
}

}  // namespace

TEST(TrainConfig, DeclaresEveryOptionNamedInTheDesign) {
  wt::wantrain::TrainConfig cfg;
  wt::OptionSet options("wantrain", "[options]");
  wt::wantrain::declare_options(options, cfg);
  const std::string help = options.help_text();
  // The command-line names that scripts, docs and users rely on (design.md).
  for (const char* name : {"config",
                           "output-dir",
                           "mode",
                           "seed",
                           "dry-run",
                           "log-every",
                           "threads",
                           "help",
                           "version",
                           "data",
                           "batch-size",
                           "prefetch",
                           "no-drop-last",
                           "shard-affinity",
                           "val-data",
                           "val-every",
                           "model-config",
                           "init",
                           "timestep-sampling",
                           "logit-mean",
                           "logit-std",
                           "shift",
                           "steps",
                           "epochs",
                           "lr",
                           "betas",
                           "weight-decay",
                           "schedule",
                           "warmup-steps",
                           "scale-lr",
                           "clip",
                           "ema-decay",
                           "grad-accum",
                           "precision",
                           "backend",
                           "bucket-mb",
                           "comm-timeout",
                           "allow-unused",
                           "save-every",
                           "keep",
                           "keep-best",
                           "resume",
                           "on-ckpt-error",
                           "teacher",
                           "teacher-config",
                           "student-init",
                           "teacher-precision",
                           "distill-target-weight",
                           "max-skipped"})
    EXPECT_NE(help.find(std::string("--") + name + " "), std::string::npos) << "--" << name;
}

TEST(TrainConfig, DefaultsAreValid) { EXPECT_EQ(validation_error({}), "valid"); }

TEST(TrainConfig, StepsAndEpochsAreExclusive) {
  wt::wantrain::TrainConfig cfg;
  cfg.steps = 10;
  cfg.epochs = 2;
  EXPECT_EQ(validation_error(cfg), "option --steps: give --steps or --epochs, not both");
}

TEST(TrainConfig, RangeChecksNameTheOption) {
  wt::wantrain::TrainConfig a, b, c, d, e;
  a.batch_size = 0;
  b.ema_decay = 1.0;
  c.comm_timeout = 0;
  d.mode = "distill";
  EXPECT_EQ(validation_error(a), "option --batch-size: must be at least 1");
  EXPECT_EQ(validation_error(b), "option --ema-decay: must be in [0, 1)");
  EXPECT_EQ(validation_error(c), "option --comm-timeout: must be a positive number of seconds");
  EXPECT_EQ(validation_error(d), "option --teacher: --mode distill needs a teacher");
  e.teacher = "teacher.safetensors";  // given, but --mode is train: refused rather than ignored
  EXPECT_EQ(validation_error(e), "option --teacher: only used with --mode distill");
}

// --attention-chunk: fused by default, auto, 0 or a number of queries;
// anything else one line naming the option.
TEST(TrainConfig, AttentionChunkIsFusedAutoZeroOrQueries) {
  wt::wantrain::TrainConfig cfg;
  EXPECT_EQ(cfg.attention_chunk, "fused");
  EXPECT_EQ(wt::wantrain::wan_run_options(cfg).attention_chunk, wt::nn::kFusedAttention);
  for (const auto& [text, chunk] :
       {std::pair<std::string, int64_t>{"auto", wt::nn::kAutoAttentionChunk}, {"0", 0}, {"512", 512}}) {
    cfg.attention_chunk = text;
    EXPECT_EQ(validation_error(cfg), "valid") << text;
    EXPECT_EQ(wt::wantrain::wan_run_options(cfg).attention_chunk, chunk) << text;
  }
  for (const std::string bad : {"-1", "none", "256q", ""}) {
    cfg.attention_chunk = bad;
    EXPECT_EQ(
        validation_error(cfg),
        "option --attention-chunk: expected fused, auto, 0 (the whole score matrix) or a number of queries, got '" +
            bad + "'");
  }
}

TEST(TrainConfig, BetasReadAsCommaSeparatedPairInUnitInterval) {
  wt::wantrain::Betas betas;
  std::istringstream("0.8,0.95") >> betas;
  EXPECT_DOUBLE_EQ(betas.beta1, 0.8);
  EXPECT_DOUBLE_EQ(betas.beta2, 0.95);
  for (const char* bad : {"0.9", "0.9;0.99", "1.2,0.9", "0.9,-0.1"}) {
    wt::wantrain::Betas b;
    std::istringstream in(bad);
    in >> b;
    EXPECT_TRUE(in.fail()) << bad;
  }
  std::ostringstream out;
  out << betas;
  EXPECT_EQ(out.str(), "0.8,0.95");
}

TEST(TrainConfig, ThreadsDefaultToTheNodesCoresSharedAmongItsRanks) {
  wt::wantrain::TrainConfig cfg;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(wt::threads_per_rank(cfg.threads, 1), cores);
  EXPECT_EQ(wt::threads_per_rank(cfg.threads, cores * 2), 1);
  cfg.threads = 3;
  EXPECT_EQ(wt::threads_per_rank(cfg.threads, 8), 3);
}
