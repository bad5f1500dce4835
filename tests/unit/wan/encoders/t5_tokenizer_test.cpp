// The umT5 tokenizer (wan/encoders: prompt_text, sentencepiece_model,
// t5_tokenizer).
//
// PromptText.*: Wan's cleaning on its own, against strings worked out by
// hand from the steps of ftfy.fix_text, html.unescape (twice) and
// whitespace_clean (the comment beside each case says which step does what).
//
// T5Tokenizer.*: SentencePiece models trained here by spm_train on a text the
// test writes (umT5's special ids: pad 0, EOS 1, unk 2, no BOS), and the ids
// checked against python3-sentencepiece, which is SentencePiece itself: on
// prompts whose cleaned form is written by hand (ids + EOS), and on random
// text through the model alone (normalisation, unknown characters, byte
// fallback, user-defined pieces, kept spaces). Then truncation, padding, the
// mask, and the one-line errors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "../../../common/launch.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/encoders/prompt_text.hpp"
#include "wantrain/wan/encoders/sentencepiece_model.hpp"
#include "wantrain/wan/encoders/t5_tokenizer.hpp"

namespace fs = std::filesystem;
using wt::wan::clean_prompt;
using wt::wan::SentencePieceModel;
using wt::wan::T5Tokenizer;

namespace {

// ---- models trained once for the suite ---------------------------------------

struct Models {
  std::string dir, plain, bytes, spaces, bpe;  // .model files
  std::string error;                           // why they could not be made
};

std::string corpus() {
  const std::vector<std::string> words = {
      "a",      "the",    "cat",      "dog",    "runs",   "over",   "lazy",   "quick", "brown",   "fox",
      "jumps",  "video",  "of",       "sunset", "ocean",  "waves",  "camera", "pans",  "slowly",  "city",
      "night",  "lights", "rain",     "street", "neon",   "Café",   "naïve",  "über",  "straße",  "façade",
      "日本語", "の",     "テキスト", "中文",   "字符",   "한국어", "Привет", "мир",   "\"",      "'",
      "&",      "<3",     "fine",     "LOUD",   "NOISES", "quotes", "Tom",    "Jerry", "friends", "line"};
  std::mt19937 draw(7);
  std::string text;
  for (int line = 0; line < 600; ++line) {
    const int count = 3 + static_cast<int>(draw() % 10);
    for (int w = 0; w < count; ++w) text += (w ? " " : "") + words[draw() % words.size()];
    text += "\n";
  }
  return text;
}

const Models& models() {
  static const Models made = [] {
    Models m;
    m.dir = (fs::path(::testing::TempDir()) / fmt::format("t5-tokenizer-{}", ::getpid())).string();
    fs::remove_all(m.dir);
    fs::create_directories(m.dir);
    std::ofstream(m.dir + "/corpus.txt", std::ios::binary) << corpus();
    // umT5's special ids; --hard_vocab_limit=false: the vocabulary is what a
    // small text gives, up to vocab_size.
    const std::string common = fmt::format(
        "spm_train --input={}/corpus.txt --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 --hard_vocab_limit=false "
        "--num_threads=1 --minloglevel=2",
        m.dir);
    const std::vector<std::pair<std::string*, std::string>> runs = {
        {&m.plain, "plain --model_type=unigram --vocab_size=200 --character_coverage=1.0"},
        // Characters seen once or twice fall outside the coverage: byte pieces.
        {&m.bytes,
         "bytes --model_type=unigram --vocab_size=400 --character_coverage=0.995 --byte_fallback=true "
         "'--user_defined_symbols=<cam>,city night'"},
        {&m.spaces,
         "spaces --model_type=unigram --vocab_size=150 --character_coverage=0.98 "
         "--remove_extra_whitespaces=false --user_defined_symbols=ne"},
        {&m.bpe, "bpe --model_type=bpe --vocab_size=150"}};
    for (const auto& [path, flags] : runs) {
      const std::string name = flags.substr(0, flags.find(' '));
      *path = m.dir + "/" + name + ".model";
      const auto job = wt::testing::launch(
          fmt::format("{} --model_prefix={}/{} {}", common, m.dir, name, flags.substr(flags.find(' ') + 1)));
      if (job.status != 0 || !fs::exists(*path)) {
        m.error = fmt::format("spm_train ({}) failed: {}", name, job.output);
        break;
      }
    }
    return m;
  }();
  return made;
}

// python3-sentencepiece's ids for each text.
std::vector<std::vector<int>> reference_ids(const std::string& model, const std::vector<std::string>& texts) {
  const std::string dir = models().dir;
  static int call = 0;
  const std::string input = fmt::format("{}/texts-{}.json", dir, call),
                    output = fmt::format("{}/ids-{}.json", dir, call);
  ++call;
  std::ofstream(input, std::ios::binary) << nlohmann::json(texts).dump();
  std::ofstream(dir + "/reference.py") << "import json, sys\n"
                                          "import sentencepiece\n"
                                          "model = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])\n"
                                          "texts = json.load(open(sys.argv[2], encoding='utf-8'))\n"
                                          "json.dump([model.encode(t) for t in texts], open(sys.argv[3], 'w'))\n";
  const auto job =
      wt::testing::launch(fmt::format("{} {}/reference.py {} {} {}", WANTRAIN_PYTHON, dir, model, input, output));
  EXPECT_EQ(job.status, 0) << job.output;
  if (job.status != 0) return {};
  return nlohmann::json::parse(wt::testing::read_text(output)).get<std::vector<std::vector<int>>>();
}

// Random text: letters, spaces of every kind, accents written both ways,
// scripts in and out of the corpus, emoji, compatibility forms, controls.
std::vector<std::string> random_texts(unsigned seed, int count) {
  const std::vector<std::string> pool = {
      "a",       "e",   "n",      "t",      "o",     "s",     "c",          "i",      "y",      "T",      "X",
      "Z",       "0",   "7",      ".",      ",",     "!",     "?",          "'",      "\"",     "-",      "(",
      ")",       " ",   "  ",     "\t",     "\n",    "\r",    "\u3000",     "\u00a0", "\u200b", "\u2028", "é",
      "e\u0301", "ü",   "ß",      "ç",      "日",    "本",    "語",         "の",     "中",     "文",     "한",
      "П",       "р",   "и",      "😀",      "🎬",     "🤖",  "½",          "ﬁ",      "Ａ",     "ｂ",     "１",
      "①",       "™",   "…",      "—",      "“",     "”",     "’",          "\x7f",   "\ufeff", "ﾀ",      "ｰ",
      "㍿",      "Ⅻ",   "Ǆ",      "ŉ",      "▁",     "<cam>", "city night", "city",   "night",  "ne",     "Café",
      "über",    "the", "camera", "sunset", "ocean", "lights"};
  std::mt19937 draw(seed);
  std::vector<std::string> texts = {"", " ", "   ", "\t\n", "a", "  a  b  ", "<cam><cam>", "city nightcity night"};
  while (static_cast<int>(texts.size()) < count) {
    std::string text;
    const int pieces = static_cast<int>(draw() % 16);
    for (int k = 0; k < pieces; ++k) text += pool[draw() % pool.size()];
    texts.push_back(text);
  }
  return texts;
}

std::string one_line_usage_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const wt::UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "no UsageError";
  return {};
}

}  // namespace

// ---- cleaning ----------------------------------------------------------------

TEST(PromptText, WhitespaceRunsBecomeOneSpaceAndEndsAreStripped) {
  // whitespace_clean: tabs, newlines, U+00A0, U+3000 (ftfy made it a space)
  // and U+2028 (ftfy made it a newline) are all \s.
  EXPECT_EQ(clean_prompt("  A  cat\tsits\n\non a\u00a0mat.\u3000\u2028 "), "A cat sits on a mat.");
  EXPECT_EQ(clean_prompt("line one\r\nline two"), "line one line two");
  EXPECT_EQ(clean_prompt(" \t\n "), "");
  EXPECT_EQ(clean_prompt(""), "");
  // U+200B (zero width space) is not whitespace: kept.
  EXPECT_EQ(clean_prompt("a\u200bb"), "a\u200bb");
}

TEST(PromptText, TypographicQuotesBecomeAscii) {
  // ftfy's uncurl_quotes: U+2018-U+201B and U+02BC -> ', U+201C-U+201F -> ".
  EXPECT_EQ(clean_prompt("\u201cHi\u201d, she said \u2018twice\u2019 \u201eunten\u201f \u201aa\u201b \u02bcn"),
            "\"Hi\", she said 'twice' \"unten\" 'a' 'n");
  // Guillemets and primes are not quotes to ftfy.
  EXPECT_EQ(clean_prompt("\u00abx\u00bb \u2032"), "\u00abx\u00bb \u2032");
}

TEST(PromptText, HtmlEntitiesAreDecodedAsWanDecodesThem) {
  EXPECT_EQ(clean_prompt("Tom &amp; Jerry caf&eacute; &lt;b&gt; &quot;x&quot; &#39;y&#x27;"),
            "Tom & Jerry café <b> \"x\" 'y'");
  // ftfy decodes until nothing changes (no '<' in the line), then
  // html.unescape twice more: any depth of &amp; becomes &.
  EXPECT_EQ(clean_prompt("x &amp;amp;amp;amp;"), "x &");
  // A literal '<': ftfy leaves entities alone; html.unescape twice.
  EXPECT_EQ(clean_prompt("x < y &amp;amp;amp;"), "x < y &amp;");
  // ftfy decodes &rsquo; and then straightens it; html.unescape does not.
  EXPECT_EQ(clean_prompt("don&rsquo;t"), "don't");
  EXPECT_EQ(clean_prompt("a<b don&rsquo;t"), "a<b don\u2019t");
  // The '<' rule holds from its line on: line 1 by ftfy, line 3 twice only.
  EXPECT_EQ(clean_prompt("&amp;amp;amp;\n<p>\n&amp;amp;amp;"), "& <p> &amp;");
  // All-capitals names of lower-case entities (ftfy), upper-cased: ß -> SS.
  EXPECT_EQ(clean_prompt("P&EACUTE;REZ STRA&SZLIG;E"), "P\u00c9REZ STRASSE");
  // Numeric references: in and out of range, Windows-1252 for 128-159.
  EXPECT_EQ(clean_prompt("&#128512;&#x1F600; &#150; &#0; &#xD800;"), "\U0001F600\U0001F600 \u2013 \uFFFD \uFFFD");
  // &nbsp; is whitespace once decoded.
  EXPECT_EQ(clean_prompt("a&nbsp;&nbsp;b"), "a b");
  // Not entities: left as written.
  EXPECT_EQ(clean_prompt("AT&T R&D & co"), "AT&T R&D & co");
}

TEST(PromptText, UnescapeHtmlFollowsPython) {
  using wt::wan::unescape_html;
  EXPECT_EQ(unescape_html("&amp"), "&");      // a name valid without ';'
  EXPECT_EQ(unescape_html("&ampx;"), "&x;");  // its longest such prefix, the rest kept
  EXPECT_EQ(unescape_html("&notit; &notin;"), "\u00acit; \u2209");
  EXPECT_EQ(unescape_html("&#65&#x42;&#X43"), "ABC");  // ';' optional after digits
  EXPECT_EQ(unescape_html("&#; &#x; &; & ;"), "&#; &#x; &; & ;");
  EXPECT_EQ(unescape_html("&#1;&#x7f;&#xFFFF;"), "");  // code points HTML drops
  EXPECT_EQ(unescape_html("&#13;&#x80;&#x110000;"), "\r\u20ac\uFFFD");
  EXPECT_EQ(unescape_html("&check;"), "&check;");  // an HTML5-only name: the table's limit
}

TEST(PromptText, FtfyFixesOrdinaryText) {
  // NFC: a combining accent joins its letter; Hangul jamo compose.
  EXPECT_EQ(clean_prompt("e\u0301te\u0301 \u1100\u1161"), "\u00e9t\u00e9 \uac00");
  // Latin ligatures split; full- and half-width forms made standard.
  EXPECT_EQ(clean_prompt("\ufb01ne \ufb02ow \ufb03"), "fine flow ffi");
  EXPECT_EQ(clean_prompt("\uff21\uff22\uff23\uff11\uff12 \uff83\uff7d\uff84"), "ABC12 \u30c6\u30b9\u30c8");
  // Control characters and the byte-order mark removed; terminal colours too.
  EXPECT_EQ(clean_prompt("a\x01"
                         "b\x07"
                         "c\ufeffd\u206ae"),
            "abcde");
  EXPECT_EQ(clean_prompt("\x1b[1;31mred\x1b[0m"), "red");
  // C1 controls read as Windows-1252: 0x85 is an ellipsis, 0x92 a curly
  // apostrophe (then straightened).
  EXPECT_EQ(clean_prompt("wait\u0085 it\u0092s"), "wait\u2026 it's");
  // Mojibake is not repaired (ftfy's fix_encoding is not ported).
  EXPECT_EQ(clean_prompt("caf\u00c3\u00a9"), "caf\u00c3\u00a9");
}

TEST(PromptText, InvalidUtf8IsFound) {
  using wt::wan::invalid_utf8_offset;
  using wt::wan::is_valid_utf8;
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("caf\u00e9 \u65e5\u672c \U0001F600"));
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe6\x97"));          // cut short
  EXPECT_EQ(invalid_utf8_offset("ab\xff"
                                "c"),
            2u);
  EXPECT_EQ(invalid_utf8_offset("\u00e9\x80"), 2u);
  EXPECT_EQ(invalid_utf8_offset("ok"), std::string::npos);
  const auto message = one_line_usage_error([] { clean_prompt("bad \xff"); });
  EXPECT_NE(message.find("not valid UTF-8 (byte 4)"), std::string::npos) << message;
}

// ---- ids ---------------------------------------------------------------------

TEST(T5Tokenizer, IdsAreSentencePiecesOfTheCleanedPromptThenEos) {
  ASSERT_EQ(models().error, "");
  // Each prompt and its cleaned form, worked out by hand.
  const std::vector<std::pair<std::string, std::string>> prompts = {
      {"A quick brown fox jumps over the lazy dog.", "A quick brown fox jumps over the lazy dog."},
      {"  Caf\u00e9   na\u00efve\t\u00fcber\n\nstra\u00dfe  ", "Caf\u00e9 na\u00efve \u00fcber stra\u00dfe"},
      {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587\u5b57\u7b26 \ud55c\uad6d\uc5b4",
       "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587\u5b57\u7b26 \ud55c\uad6d\uc5b4"},
      {"A robot \U0001F916 films a sunset \U0001F3AC\U0001F600",
       "A robot \U0001F916 films a sunset \U0001F3AC\U0001F600"},
      {"\u201cQuoted\u201d and \u2018single\u2019 quotes", "\"Quoted\" and 'single' quotes"},
      {"Tom &amp; Jerry &amp;amp; friends &lt;3 caf&eacute;", "Tom & Jerry & friends <3 caf\u00e9"},
      {"line one\r\nline two\u2028three\u00a0\u00a0four", "line one line two three four"},
      {"\uff2c\uff2f\uff35\uff24\u3000\uff2e\uff2f\uff29\uff33\uff25\uff33 \ufb01ne", "LOUD NOISES fine"},
      {"e\u0301te\u0301", "\u00e9t\u00e9"},
      {"", ""},
      {" \t\n ", ""}};
  for (const std::string& model : {models().plain, models().bytes}) {
    SCOPED_TRACE(model);
    const T5Tokenizer tokenizer(model);
    EXPECT_EQ(tokenizer.eos_id(), 1);
    EXPECT_EQ(tokenizer.pad_id(), 0);
    std::vector<std::string> raw, cleaned;
    for (const auto& [prompt, clean] : prompts) {
      raw.push_back(prompt);
      cleaned.push_back(clean);
    }
    const auto expected = reference_ids(model, cleaned);
    ASSERT_EQ(expected.size(), prompts.size());
    const auto tokens = tokenizer.encode(raw, 64);
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      SCOPED_TRACE(prompts[p].first);
      EXPECT_EQ(clean_prompt(raw[p]), cleaned[p]);
      auto with_eos = expected[p];
      with_eos.push_back(1);
      EXPECT_EQ(tokenizer.token_ids(raw[p]), with_eos);
      const auto length = static_cast<int64_t>(with_eos.size());
      ASSERT_EQ(tokens.lengths[p], length);
      const auto row = tokens.ids[static_cast<int64_t>(p)].slice(0, 0, length);
      EXPECT_TRUE(torch::equal(row, torch::tensor(std::vector<int64_t>(with_eos.begin(), with_eos.end()))));
    }
  }
}

TEST(T5Tokenizer, ModelIdsMatchSentencePieceOnRandomText) {
  ASSERT_EQ(models().error, "");
  // Normalisation (NFKC, spaces), unknown characters and their runs, byte
  // fallback, user-defined pieces, and a model that keeps extra spaces.
  unsigned seed = 11;
  for (const std::string& path : {models().plain, models().bytes, models().spaces}) {
    SCOPED_TRACE(path);
    const auto model = SentencePieceModel::load(path);
    const auto texts = random_texts(seed++, 400);
    const auto expected = reference_ids(path, texts);
    ASSERT_EQ(expected.size(), texts.size());
    int wrong = 0;
    for (std::size_t t = 0; t < texts.size(); ++t) {
      if (model.encode(texts[t]) == expected[t]) continue;
      if (++wrong <= 5) ADD_FAILURE() << "text " << nlohmann::json(texts[t]).dump() << ": ids differ";
    }
    EXPECT_EQ(wrong, 0);
    // The texts reach the paths they are meant to: unknown characters, byte
    // pieces and user-defined pieces occur in SentencePiece's answers.
    std::map<std::string, int> seen;
    for (const auto& ids : expected) {
      for (const int id : ids) {
        const std::string& piece = model.piece(id);
        if (id == model.unk_id()) ++seen["unknown"];
        if (piece.rfind("<0x", 0) == 0) ++seen["byte"];
        if (piece == "<cam>" || piece == "city night" || piece == "ne") ++seen["user-defined"];
      }
    }
    if (path == models().plain) {
      EXPECT_GT(seen["unknown"], 0);
    } else {
      EXPECT_GT(seen["user-defined"], 0);
    }
    if (path == models().bytes) {
      EXPECT_GT(seen["byte"], 0);
    }
  }
  // The pieces the special ids name.
  const auto model = SentencePieceModel::load(models().plain);
  EXPECT_EQ(model.piece(0), "<pad>");
  EXPECT_EQ(model.piece(1), "</s>");
  EXPECT_EQ(model.piece(2), "<unk>");
  EXPECT_EQ(model.unk_id(), 2);
}

// ---- the batch: truncation, padding, mask ------------------------------------

TEST(T5Tokenizer, LongPromptsAreCutKeepingEosAndCounted) {
  ASSERT_EQ(models().error, "");
  const T5Tokenizer tokenizer(models().plain);
  const std::string long_prompt = "the quick brown fox jumps over the lazy dog in the rain at night";
  const std::string short_prompt = "a cat";
  const auto full_long = tokenizer.token_ids(long_prompt);
  const auto full_short = tokenizer.token_ids(short_prompt);
  const int64_t text_len = 8;
  ASSERT_GT(static_cast<int64_t>(full_long.size()), text_len);
  ASSERT_LT(static_cast<int64_t>(full_short.size()), text_len);

  const auto tokens = tokenizer.encode({long_prompt, short_prompt, long_prompt}, text_len);
  EXPECT_EQ(tokens.truncated, 2);
  EXPECT_EQ(tokens.ids.sizes(), (std::vector<int64_t>{3, text_len}));
  EXPECT_EQ(tokens.ids.scalar_type(), torch::kLong);
  EXPECT_EQ(tokens.mask.sizes(), (std::vector<int64_t>{3, text_len}));
  EXPECT_EQ(tokens.mask.scalar_type(), torch::kLong);
  EXPECT_EQ(tokens.lengths, (std::vector<int64_t>{text_len, static_cast<int64_t>(full_short.size()), text_len}));
  EXPECT_EQ(tokens.full_lengths,
            (std::vector<int64_t>{static_cast<int64_t>(full_long.size()), static_cast<int64_t>(full_short.size()),
                                  static_cast<int64_t>(full_long.size())}));
  // The first text_len - 1 tokens, then EOS.
  for (int64_t t = 0; t < text_len - 1; ++t) EXPECT_EQ(tokens.ids[0][t].item<int64_t>(), full_long[t]);
  EXPECT_EQ(tokens.ids[0][text_len - 1].item<int64_t>(), tokenizer.eos_id());
  EXPECT_TRUE(torch::equal(tokens.ids[0], tokens.ids[2]));
  // The short one: its tokens, then pad ids (0) under a zero mask.
  const auto n = static_cast<int64_t>(full_short.size());
  for (int64_t t = 0; t < n; ++t) EXPECT_EQ(tokens.ids[1][t].item<int64_t>(), full_short[t]);
  EXPECT_EQ(tokens.ids[1].slice(0, n).eq(0).all().item<bool>(), true);
  EXPECT_EQ(tokens.mask[1].slice(0, 0, n).eq(1).all().item<bool>(), true);
  EXPECT_EQ(tokens.mask[1].slice(0, n).eq(0).all().item<bool>(), true);
  EXPECT_TRUE(torch::equal(tokens.mask.sum(1), torch::tensor(tokens.lengths)));

  // Exactly text_len tokens: kept whole, not counted.
  const auto exact = tokenizer.encode({long_prompt}, static_cast<int64_t>(full_long.size()));
  EXPECT_EQ(exact.truncated, 0);
  EXPECT_EQ(exact.mask.sum().item<int64_t>(), static_cast<int64_t>(full_long.size()));
  // Wan's default length: nothing here comes near it.
  const auto wan = tokenizer.encode({short_prompt});
  EXPECT_EQ(wan.ids.size(1), 512);
  EXPECT_EQ(wan.truncated, 0);
}

// ---- errors ------------------------------------------------------------------

TEST(T5Tokenizer, BadModelPathsAreOneLineNamingThePath) {
  ASSERT_EQ(models().error, "");
  const std::string dir = models().dir;

  const std::string missing = dir + "/missing.model";
  auto message = one_line_usage_error([&] { T5Tokenizer{missing}; });
  EXPECT_NE(message.find(missing + ": no such file"), std::string::npos) << message;

  const std::string empty_folder = dir + "/no-model";
  fs::create_directories(empty_folder);
  message = one_line_usage_error([&] { T5Tokenizer{empty_folder}; });
  EXPECT_NE(message.find(empty_folder + ": a folder without tokenizer.json or spiece.model"), std::string::npos)
      << message;

  const std::string corrupt = dir + "/corrupt.model";
  std::string junk;
  std::mt19937 draw(3);
  for (int k = 0; k < 300; ++k) junk += static_cast<char>(draw() & 0xFF);
  std::ofstream(corrupt, std::ios::binary) << junk;
  message = one_line_usage_error([&] { T5Tokenizer{corrupt}; });
  EXPECT_NE(message.find(corrupt + ": not a SentencePiece model"), std::string::npos) << message;

  // A model cut short, and one of another kind.
  const std::string cut = dir + "/cut.model";
  std::ofstream(cut, std::ios::binary) << wt::testing::read_text(models().plain).substr(0, 1000);
  message = one_line_usage_error([&] { T5Tokenizer{cut}; });
  EXPECT_NE(message.find(cut + ": not a SentencePiece model"), std::string::npos) << message;
  message = one_line_usage_error([&] { T5Tokenizer{models().bpe}; });
  EXPECT_NE(message.find(models().bpe + ": a BPE SentencePiece model"), std::string::npos) << message;

  // A folder holding spiece.model is the released layout (google/umt5-xxl/).
  const std::string folder = dir + "/umt5-xxl";
  fs::create_directories(folder);
  fs::copy_file(models().plain, folder + "/spiece.model", fs::copy_options::overwrite_existing);
  const T5Tokenizer from_folder(folder);
  EXPECT_EQ(from_folder.model_path(), folder + "/spiece.model");
  EXPECT_EQ(from_folder.token_ids("a cat"), T5Tokenizer(models().plain).token_ids("a cat"));
}

TEST(T5Tokenizer, InvalidPromptsAndLengthsAreUsageErrors) {
  ASSERT_EQ(models().error, "");
  const T5Tokenizer tokenizer(models().plain);
  const auto message = one_line_usage_error([&] { tokenizer.encode({"fine", "caf\xe9"}); });
  EXPECT_NE(message.find("prompt 1 is not valid UTF-8 (byte 3)"), std::string::npos) << message;
  EXPECT_THROW(tokenizer.encode({"a"}, 0), wt::SettingError);
  const auto none = tokenizer.encode({}, 16);
  EXPECT_EQ(none.ids.sizes(), (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(none.truncated, 0);
}

// ---- tokenizer.json ------------------------------------------------------------

namespace {

// A Unigram tokenizer.json of seven pieces, with `pre_tokenizer` and `model_type`.
std::string tokenizer_json(const std::string& pre_tokenizer = R"({"type": "Metaspace", "replacement": "▁",
                                                                   "prepend_scheme": "always", "split": true})",
                           const std::string& model_type = "Unigram") {
  return fmt::format(
      R"({{"added_tokens": [{{"id": 0, "content": "<pad>", "special": true}}, {{"id": 1, "content": "</s>",
          "special": true}}, {{"id": 2, "content": "<unk>", "special": true}}],
          "normalizer": {{"type": "Sequence", "normalizers": [{{"type": "Strip", "strip_left": true,
          "strip_right": true}}, {{"type": "Replace", "pattern": {{"Regex": " {{2,}}"}}, "content": " "}}]}},
          "pre_tokenizer": {},
          "model": {{"type": "{}", "unk_id": 2, "byte_fallback": false,
                     "vocab": [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["▁a", -1.0], ["▁ab", -1.5],
                               ["b", -2.0], ["▁", -3.0]]}}}})",
      pre_tokenizer, model_type);
}

}  // namespace

// The pieces worked out by hand from the vocabulary's scores: "▁ab" (-1.5)
// beats "▁a" + "b" (-3); "▁b" has no piece, so "▁" + "b"; "c" no piece at
// all: <unk>, a run of two one <unk>; "</s>" in the text is the EOS.
TEST(T5Tokenizer, TokenizerJsonCutsAsTheUnigramScoresSay) {
  const std::string dir = wt::testing::fresh("tokenizer-json");
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << tokenizer_json();
  const T5Tokenizer tokenizer(dir);
  EXPECT_EQ(tokenizer.model_path(), dir + "/tokenizer.json");
  EXPECT_EQ(tokenizer.eos_id(), 1);
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.token_ids("a ab b"), (std::vector<int>{3, 4, 6, 5, 1}));
  EXPECT_EQ(tokenizer.token_ids("  ab   cc "), (std::vector<int>{4, 6, 2, 1}));
  EXPECT_EQ(tokenizer.token_ids("a</s>b"), (std::vector<int>{3, 1, 6, 5, 1}));
  // Split by whitespace first, each word its own "▁": the same pieces.
  std::ofstream(dir + "/tokenizer.json") << tokenizer_json(
      R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Metaspace",
          "replacement": "▁", "prepend_scheme": "always", "split": true}]})");
  EXPECT_EQ(T5Tokenizer(dir).token_ids("a ab b"), (std::vector<int>{3, 4, 6, 5, 1}));
}

TEST(T5Tokenizer, TokenizerJsonOfWhatIsNotReadIsOneLine) {
  const std::string dir = wt::testing::fresh("tokenizer-json-bad");
  fs::create_directories(dir);
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{\"model\": ", ": not a JSON object (a tokenizers file, tokenizer.json)"},
           {tokenizer_json(R"({"type": "Metaspace"})", "BPE"), ": a BPE model; only Unigram models (umT5's) are read"},
           {tokenizer_json(R"({"type": "Split", "pattern": {"String": " "}})"),
            ": a Split pre-tokenizer, which is not read (WhitespaceSplit, Metaspace and Sequence are)"},
           {R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}})",
            ": has no EOS control piece (\"</s>\"), which umT5's has"}}) {
    SCOPED_TRACE(expected);
    std::ofstream(dir + "/tokenizer.json") << text;
    const auto message = one_line_usage_error([&] { T5Tokenizer{dir}; });
    EXPECT_NE(message.find(dir + "/tokenizer.json" + expected), std::string::npos) << message;
  }
}
