// OptionSet: one declaration serves the command line, the INI file, --help
// and the resolved table; every mistake is a UsageError naming what is wrong.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "wantrain/util/error.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/util/text.hpp"

namespace {

struct Sample {
  std::string config;
  double lr = 1e-4;
  int batch = 1;
  bool verbose = false;
  std::string precision = "fp32";
};

struct Fixture {
  Sample s;
  wt::OptionSet options{"tool", "[options]"};
  Fixture() {
    options.group("general")
        .standard_options(&s.config)
        .add("lr", &s.lr, "learning rate")
        .add("batch-size", &s.batch, "per rank")
        .flag("verbose", &s.verbose, "say more")
        .choice("precision", &s.precision, {"fp32", "bf16"}, "compute precision");
  }
  wt::OptionSet::Outcome parse(std::vector<std::string> args) {
    args.insert(args.begin(), "tool");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return options.parse(static_cast<int>(argv.size()), argv.data());
  }
};

std::string write_ini(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string usage_error_of(Fixture& f, std::vector<std::string> args) {
  try {
    f.parse(std::move(args));
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

}  // namespace

TEST(OptionSet, DefaultsAreTheFieldsInitialValues) {
  Fixture f;
  EXPECT_EQ(f.parse({}), wt::OptionSet::Outcome::Run);
  EXPECT_DOUBLE_EQ(f.s.lr, 1e-4);
  EXPECT_EQ(f.s.batch, 1);
  EXPECT_FALSE(f.s.verbose);
}

TEST(OptionSet, CommandLineFillsFields) {
  Fixture f;
  f.parse({"--lr", "0.5", "--batch-size=4", "--verbose", "--precision", "bf16"});
  EXPECT_DOUBLE_EQ(f.s.lr, 0.5);
  EXPECT_EQ(f.s.batch, 4);
  EXPECT_TRUE(f.s.verbose);
  EXPECT_EQ(f.s.precision, "bf16");
}

TEST(OptionSet, IniFileUsesTheSameNames) {
  Fixture f;
  const auto ini = write_ini("same-names.ini", "# a comment\nlr = 0.25\nbatch-size = 8\nverbose = true\n");
  f.parse({"--config", ini});
  EXPECT_DOUBLE_EQ(f.s.lr, 0.25);
  EXPECT_EQ(f.s.batch, 8);
  EXPECT_TRUE(f.s.verbose);
}

TEST(OptionSet, CommandLineWinsOverIniFile) {
  Fixture f;
  const auto ini = write_ini("cli-wins.ini", "lr = 0.25\nbatch-size = 8\n");
  f.parse({"--config", ini, "--lr", "0.75"});
  EXPECT_DOUBLE_EQ(f.s.lr, 0.75);
  EXPECT_EQ(f.s.batch, 8);
}

TEST(OptionSet, CommandLineCanTurnOffASwitchTheIniFileTurnedOn) {
  Fixture f;
  const auto ini = write_ini("switch.ini", "verbose = true\n");
  f.parse({"--config", ini, "--verbose=false"});
  EXPECT_FALSE(f.s.verbose);
}

TEST(OptionSet, ResolvedTableNamesWhereEachValueCameFrom) {
  Fixture f;
  const auto ini = write_ini("sources.ini", "batch-size = 8\n");
  f.parse({"--config", ini, "--lr", "0.75"});
  ASSERT_EQ(f.options.resolved().size(), 4u);  // lr, batch-size, verbose, precision
  for (const auto& row : f.options.resolved()) {
    if (row.name == "lr") {
      EXPECT_EQ(row.source, "command line");
    } else if (row.name == "batch-size") {
      EXPECT_EQ(row.source, ini);
    } else if (row.name == "verbose") {
      EXPECT_EQ(row.source, "default");
    }
  }
  EXPECT_NE(f.options.resolved_table().find("lr"), std::string::npos);
}

TEST(OptionSet, UnknownOptionIsNamed) {
  Fixture f;
  EXPECT_NE(usage_error_of(f, {"--bogus", "1"}).find("'--bogus'"), std::string::npos);
}

TEST(OptionSet, BadValueNamesTheOptionAndValue) {
  Fixture f;
  const auto message = usage_error_of(f, {"--batch-size", "many"});
  EXPECT_NE(message.find("batch-size"), std::string::npos) << message;
  EXPECT_NE(message.find("many"), std::string::npos) << message;
}

TEST(OptionSet, ChoiceOutsideItsSetListsTheChoices) {
  Fixture f;
  EXPECT_EQ(usage_error_of(f, {"--precision", "fp8"}), "option --precision: 'fp8' is not one of fp32|bf16");
}

TEST(OptionSet, UnknownIniKeyNamesTheFileAndKey) {
  Fixture f;
  const auto ini = write_ini("unknown-key.ini", "lr = 0.1\nlearning-rate = 0.2\n");
  const auto message = usage_error_of(f, {"--config", ini});
  EXPECT_NE(message.find("--config " + ini), std::string::npos) << message;
  EXPECT_NE(message.find("learning-rate"), std::string::npos) << message;
}

TEST(OptionSet, BadIniValueNamesTheFile) {
  Fixture f;
  const auto ini = write_ini("bad-value.ini", "batch-size = lots\n");
  const auto message = usage_error_of(f, {"--config", ini});
  EXPECT_NE(message.find(ini), std::string::npos) << message;
  EXPECT_NE(message.find("lots"), std::string::npos) << message;
}

TEST(OptionSet, MissingIniFileIsNamed) {
  Fixture f;
  EXPECT_EQ(usage_error_of(f, {"--config", "/nonexistent/run.ini"}), "--config /nonexistent/run.ini: no such file");
}

TEST(OptionSet, HelpAndVersionAreReportedNotParsedFurther) {
  Fixture f1, f2;
  EXPECT_EQ(f1.parse({"--help", "--precision", "fp8"}), wt::OptionSet::Outcome::Help);
  EXPECT_EQ(f2.parse({"--version"}), wt::OptionSet::Outcome::Version);
}

TEST(OptionSet, HelpListsEveryDeclaredOptionWithItsDefault) {
  Fixture f;
  const std::string help = f.options.help_text();
  for (const char* name : {"--config", "--help", "--version", "--lr", "--batch-size", "--verbose", "--precision"})
    EXPECT_NE(help.find(name), std::string::npos) << name;
  EXPECT_NE(help.find("--precision fp32|bf16 (=fp32)"), std::string::npos) << help;
  EXPECT_NE(help.find("--batch-size N (=1)"), std::string::npos) << help;
}

TEST(Options, SizesParseAsTheirFormSaysOrNameTheOption) {
  EXPECT_EQ(wt::parse_sizes("21x60x104", "FxHxW", "21x60x104", "plan-latents"), (std::vector<int64_t>{21, 60, 104}));
  EXPECT_EQ(wt::parse_sizes("1x1048576x1", "FxHxW", "21x60x104", "plan-latents"),
            (std::vector<int64_t>{1, 1 << 20, 1}));
  for (const char* bad : {"21x60", "21x60x104x", "x21x60x104", "21x60x0", "21x60x1048577", "+21x60x104", " 21x60x104",
                          "21x6e1x104", ""}) {
    try {
      wt::parse_sizes(bad, "FxHxW", "21x60x104", "plan-latents");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("option --plan-latents: '") + bad + "' is not FxHxW with positive sizes, e.g. 21x60x104");
    }
  }
}

TEST(Options, HeightWidthParsesOrNamesTheOption) {
  EXPECT_EQ(wt::parse_height_width("32x48", "size"), (std::pair<int64_t, int64_t>{32, 48}));
  for (const char* bad : {"32", "x32", "32x", "0x4", "4x-1", "4x4x4", "axb", "4 x4"}) {
    try {
      wt::parse_height_width(bad, "size");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("option --size: '") + bad + "' is not HxW with positive sizes, e.g. 32x32");
    }
  }
}

TEST(DidYouMean, NamesTheClosestCandidateWhenItIsATypo) {
  const std::vector<std::string> names = {"lr", "steps", "warmup-steps", "batch-size", "num_heads"};
  EXPECT_EQ(wt::did_you_mean("stpes", names), " (did you mean 'steps'?)");         // two letters swapped: one edit
  EXPECT_EQ(wt::did_you_mean("num_head", names), " (did you mean 'num_heads'?)");  // one letter missing
  EXPECT_EQ(wt::did_you_mean("warmup_steps", names), " (did you mean 'warmup-steps'?)");
  EXPECT_EQ(wt::did_you_mean("lrr", names), " (did you mean 'lr'?)");  // short words allow one edit
  EXPECT_EQ(wt::did_you_mean("--bach-size", {"--batch-size"}, ""), " (did you mean --batch-size?)");
  // More edits than a third of the word: no guess.
  EXPECT_EQ(wt::did_you_mean("zzzzzz", names), "");
  EXPECT_EQ(wt::did_you_mean("xy", names), "");
  EXPECT_EQ(wt::did_you_mean("anything", {}), "");
}

// A library error about several settings names each as the tool's option
// when the tool maps them all, and as the settings otherwise.
TEST(SettingErrors, NameEverySettingAsTheToolsOption) {
  wt::set_option_names({{"frames", "frames"}, {"size", "size"}});
  EXPECT_STREQ(wt::SettingError(wt::SettingNames{"frames", "size"}, "6 and 40x40: not 4k + 1").what(),
               "options --frames, --size: 6 and 40x40: not 4k + 1");
  EXPECT_STREQ(wt::SettingError("size", "too small").what(), "option --size: too small");
  EXPECT_STREQ(wt::SettingError(wt::SettingNames{"frames", "max_area"}, "x").what(), "frames, max_area: x");
  wt::set_option_names({});
  EXPECT_STREQ(wt::SettingError("size", "too small").what(), "size: too small");
}

// A tool's setting -> option map comes from the options it declares: each
// option sets the setting of its name with underscores, a rename adds one
// named otherwise, and a setting no option sets stays unmapped.
TEST(SettingErrors, TheMapIsDerivedFromTheDeclaredOptions) {
  std::string size, timeout;
  int64_t step = 0;
  bool strict = false;
  wt::OptionSet options("tool", "[options]");
  options.group("g")
      .add("size", &size, "a size")
      .add("comm-timeout", &timeout, "seconds")
      .add("bucket-step", &step, "a multiple")
      .flag("strict", &strict, "fail early");
  const std::map<std::string, std::string> expected{
      {"size", "size"}, {"comm_timeout", "comm-timeout"}, {"bucket_step", "bucket-step"}, {"strict", "strict"}};
  EXPECT_EQ(options.setting_names(), expected);
  auto renamed = expected;
  renamed["step"] = "bucket-step";
  renamed["size"] = "buckets";
  EXPECT_EQ(options.setting_names({{"step", "bucket-step"}, {"size", "buckets"}}), renamed);
  wt::set_option_names(options.setting_names({{"step", "bucket-step"}}));
  EXPECT_STREQ(wt::SettingError("comm_timeout", "must be positive").what(), "option --comm-timeout: must be positive");
  EXPECT_STREQ(wt::SettingError("step", "8 is not a multiple of 16").what(),
               "option --bucket-step: 8 is not a multiple of 16");
  EXPECT_STREQ(wt::SettingError("max_area", "x").what(), "max_area: x");
  wt::set_option_names({});
}
