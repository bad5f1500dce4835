// The prompt file of wantrain --sample-prompts: musubi-tuner's short
// settings and ours, values with spaces, comments, and every bad line its
// own line naming the file and line.
#include <gtest/gtest.h>

#include <string>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/sample/sample_prompts.hpp"

namespace {

using wt::wan::parse_sample_prompts;

size_t count_in(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(SamplePrompts, LongAndShortSettingsAndCommentsParse) {
  const auto prompts = parse_sample_prompts(
      "# the run's prompts\n"
      "\n"
      "a dog walks along a beach at sunset --size 832x480 --frames 33 --seed 42\n"
      "  a cat yawns --image cat.png --negative-prompt blurry, static frames --steps 30 --cfg 4.5  \n"
      "a red ball rolls --w 256 --h 128 --f 17 --d 7 --i ball.png --n low quality --s 8 --g 0\n"
      "a well--lit room, no settings\n",
      "p.txt");
  ASSERT_EQ(prompts.size(), 4u);
  EXPECT_EQ(prompts[0].line, 3);
  EXPECT_EQ(prompts[0].prompt, "a dog walks along a beach at sunset");
  EXPECT_EQ(prompts[0].width, 832);
  EXPECT_EQ(prompts[0].height, 480);
  EXPECT_EQ(prompts[0].frames, 33);
  EXPECT_EQ(prompts[0].seed, 42u);
  EXPECT_FALSE(prompts[0].negative_prompt.has_value());
  EXPECT_EQ(prompts[1].prompt, "a cat yawns");
  EXPECT_EQ(prompts[1].image, "cat.png");
  EXPECT_EQ(prompts[1].negative_prompt, "blurry, static frames");
  EXPECT_EQ(prompts[1].steps, 30);
  EXPECT_EQ(prompts[1].cfg, 4.5);
  EXPECT_EQ(prompts[1].width, 0);  // the run's
  EXPECT_FALSE(prompts[1].seed.has_value());
  EXPECT_EQ(prompts[2].width, 256);
  EXPECT_EQ(prompts[2].height, 128);
  EXPECT_EQ(prompts[2].frames, 17);
  EXPECT_EQ(prompts[2].seed, 7u);
  EXPECT_EQ(prompts[2].image, "ball.png");
  EXPECT_EQ(prompts[2].negative_prompt, "low quality");
  EXPECT_EQ(prompts[2].steps, 8);
  EXPECT_EQ(prompts[2].cfg, 0.0);
  EXPECT_EQ(prompts[3].prompt, "a well--lit room, no settings");  // "--" inside a word is text
  EXPECT_EQ(prompts[3].line, 6);
}

TEST(SamplePrompts, EveryBadLineIsItsOwnLine) {
  try {
    parse_sample_prompts(
        "fine\n"
        "--seed 3\n"
        "a --size 832\n"
        "b --frames -1 --seed x\n"
        "c --sede 3\n"
        "d --w 64\n"
        "e --cfg -2\n",
        "bad.txt");
    FAIL() << "no error";
  } catch (const wt::UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(count_in(message, "\n"), 6u) << message;  // seven problems, one a line
    for (const char* expected :
         {"bad.txt:2: the line has settings but no prompt before them",
          "bad.txt:3: --size '832': must be WIDTHxHEIGHT in pixels, e.g. 832x480",
          "bad.txt:4: --frames '-1': a frame count must be a positive whole number",
          "bad.txt:4: --seed 'x': a seed must be a whole number of 0 or more",
          "bad.txt:5: --sede: no such setting (did you mean '--seed'?)", "bad.txt:6: --w without --h",
          "bad.txt:7: --cfg '-2': a guidance scale must be a number of 0 or more"})
      EXPECT_EQ(count_in(message, expected), 1u) << expected << "\n" << message;
    EXPECT_EQ(message.find("bad.txt:1:"), std::string::npos) << message;
  }
}

TEST(SamplePrompts, AFileWithNoPromptOrUnreadableIsOneLine) {
  EXPECT_THROW(
      {
        try {
          parse_sample_prompts("# only a comment\n\n", "empty.txt");
        } catch (const wt::UsageError& e) {
          EXPECT_STREQ(e.what(), "empty.txt: holds no prompt (one a line; # starts a comment)");
          throw;
        }
      },
      wt::UsageError);
  EXPECT_THROW(wt::wan::read_sample_prompts("/nonexistent/prompts.txt"), wt::UsageError);
}

}  // namespace
