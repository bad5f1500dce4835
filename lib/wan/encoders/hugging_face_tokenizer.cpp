#include "wantrain/wan/encoders/hugging_face_tokenizer.hpp"

#include <fmt/format.h>
#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string_view>
#include <unordered_map>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/wan/encoders/precompiled_charsmap.hpp"

namespace wt::wan {
namespace {

constexpr double kUnknownPenalty = 10.0;  // an uncovered character scores the lowest score - 10

// ---- UTF-8 -----------------------------------------------------------------

// The length of the character whose lead byte is at `at` (a stray byte: 1), within `text`.
std::size_t char_length(std::string_view text, std::size_t at) {
  static constexpr unsigned char kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return std::min<std::size_t>(kLengths[static_cast<unsigned char>(text[at]) >> 4], text.size() - at);
}

char32_t code_point(std::string_view text, std::size_t at, std::size_t length) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[at + k]); };
  if (length == 1) return byte(0);
  char32_t c = byte(0) & (0xFF >> (length + 1));
  for (std::size_t k = 1; k < length; ++k) c = (c << 6) | (byte(k) & 0x3F);
  return c;
}

// Rust's char::is_whitespace, which tokenizers' WhitespaceSplit and Strip use.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool whitespace_at(std::string_view text, std::size_t at) {
  return is_whitespace(code_point(text, at, char_length(text, at)));
}

// The whitespace characters at the end of `text`, in bytes.
std::size_t trailing_whitespace(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!whitespace_at(text, start)) break;
    end = start;
  }
  return text.size() - end;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::array<int, 256> value{};
  value.fill(-1);
  const std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (std::size_t k = 0; k < alphabet.size(); ++k) value[static_cast<unsigned char>(alphabet[k])] = int(k);
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    if (c == '=') break;
    const int v = value[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | uint32_t(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  return out;
}

icu::UnicodeString to_icu(std::string_view text) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

std::string from_icu(const icu::UnicodeString& text) {
  std::string out;
  text.toUTF8String(out);
  return out;
}

// ---- the file's parts ------------------------------------------------------

struct Normalizer {
  enum class Kind { Precompiled, ReplaceString, ReplaceRegex, Strip, Nfc, Nfkc, Nfd, Nfkd } kind;
  PrecompiledCharsmap charsmap;
  std::string pattern, content;
  std::regex regex;
  bool left = false, right = false;
};

struct PreTokenizer {
  enum class Kind { WhitespaceSplit, Metaspace } kind;
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
  std::string replacement = "\xe2\x96\x81";  // U+2581
  bool split = true;
};

struct AddedToken {
  std::string content;
  int id = -1;
  bool lstrip = false, rstrip = false;
};

// A pre-token, and whether it starts at the input's first byte (Metaspace's "first").
struct Word {
  std::string text;
  bool at_start = false;
};

}  // namespace

struct HuggingFaceTokenizer::Impl {
  std::string source;
  std::vector<std::string> pieces;
  std::vector<double> scores;
  std::unordered_map<std::string_view, int> ids;  // into `pieces`
  std::size_t longest = 0;
  double min_score = std::numeric_limits<double>::infinity();
  int unk = -1;
  bool byte_fallback = false;
  std::vector<AddedToken> added;  // the longest first
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;

  [[noreturn]] void refuse(const std::string& what) const {
    throw UsageError(fmt::format("tokenizer {}: {}", source, what));
  }

  void add_normalizer(const nlohmann::json& n) {
    const std::string type = n.value("type", std::string());
    Normalizer out{};
    if (type == "Sequence") {
      for (const auto& inner : n.at("normalizers")) add_normalizer(inner);
      return;
    }
    if (type == "Precompiled") {
      out.kind = Normalizer::Kind::Precompiled;
      const auto bytes = base64_decode(n.at("precompiled_charsmap").get<std::string>());
      const auto table = bytes ? PrecompiledCharsmap::parse(*bytes) : std::nullopt;
      if (!table) refuse("its Precompiled normalizer's precompiled_charsmap is broken");
      out.charsmap = *table;
    } else if (type == "Replace") {
      const auto& pattern = n.at("pattern");
      out.content = n.at("content").get<std::string>();
      if (pattern.contains("String")) {
        out.kind = Normalizer::Kind::ReplaceString;
        out.pattern = pattern.at("String").get<std::string>();
        if (out.pattern.empty()) refuse("a Replace normalizer of an empty string");
      } else {
        out.kind = Normalizer::Kind::ReplaceRegex;
        out.pattern = pattern.at("Regex").get<std::string>();
        try {
          out.regex = std::regex(out.pattern);
        } catch (const std::regex_error&) {
          refuse(fmt::format("a Replace normalizer's regex {} is not read", nlohmann::json(out.pattern).dump()));
        }
      }
    } else if (type == "Strip") {
      out.kind = Normalizer::Kind::Strip;
      out.left = n.value("strip_left", false);
      out.right = n.value("strip_right", false);
    } else if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
      out.kind = type == "NFC"    ? Normalizer::Kind::Nfc
                 : type == "NFKC" ? Normalizer::Kind::Nfkc
                 : type == "NFD"  ? Normalizer::Kind::Nfd
                                  : Normalizer::Kind::Nfkd;
    } else {
      refuse(
          fmt::format("a {} normalizer, which is not read (Precompiled, Replace, Strip, NFC, NFKC, NFD, NFKD "
                      "and Sequence are)",
                      type.empty() ? "typeless" : type));
    }
    normalizers.push_back(std::move(out));
  }

  void add_pre_tokenizer(const nlohmann::json& p) {
    const std::string type = p.value("type", std::string());
    if (type == "Sequence") {
      for (const auto& inner : p.at("pretokenizers")) add_pre_tokenizer(inner);
      return;
    }
    PreTokenizer out{};
    if (type == "WhitespaceSplit") {
      out.kind = PreTokenizer::Kind::WhitespaceSplit;
    } else if (type == "Metaspace") {
      out.kind = PreTokenizer::Kind::Metaspace;
      out.replacement = p.value("replacement", out.replacement);
      if (out.replacement.empty()) refuse("a Metaspace pre-tokenizer with no replacement");
      out.split = p.value("split", true);
      const std::string scheme = p.contains("prepend_scheme")
                                     ? p["prepend_scheme"].get<std::string>()
                                     : (p.value("add_prefix_space", true) ? "always" : "never");  // before 0.15
      if (scheme == "always")
        out.prepend = PreTokenizer::Prepend::Always;
      else if (scheme == "first")
        out.prepend = PreTokenizer::Prepend::First;
      else if (scheme == "never")
        out.prepend = PreTokenizer::Prepend::Never;
      else
        refuse(fmt::format("a Metaspace prepend_scheme \"{}\" (always, first or never)", scheme));
    } else {
      refuse(fmt::format("a {} pre-tokenizer, which is not read (WhitespaceSplit, Metaspace and Sequence are)",
                         type.empty() ? "typeless" : type));
    }
    pre_tokenizers.push_back(out);
  }

  std::string normalize(std::string text) const {
    for (const auto& n : normalizers) {
      switch (n.kind) {
        case Normalizer::Kind::Precompiled: text = precompiled(n.charsmap, text); break;
        case Normalizer::Kind::ReplaceString: {
          std::string out;
          for (std::size_t at = 0;;) {
            const auto found = text.find(n.pattern, at);
            out.append(text, at, found == std::string::npos ? std::string::npos : found - at);
            if (found == std::string::npos) break;
            out += n.content;
            at = found + n.pattern.size();
          }
          text = std::move(out);
          break;
        }
        case Normalizer::Kind::ReplaceRegex: {
          std::string out;
          std::size_t at = 0;
          for (auto it = std::sregex_iterator(text.begin(), text.end(), n.regex); it != std::sregex_iterator(); ++it) {
            const auto start = static_cast<std::size_t>(it->position());
            out.append(text, at, start - at);
            out += n.content;  // as written: no $1
            at = start + static_cast<std::size_t>(it->length());
          }
          out.append(text, at);
          text = std::move(out);
          break;
        }
        case Normalizer::Kind::Strip: {
          std::size_t start = 0, end = text.size();
          if (n.left)
            while (start < end && whitespace_at(text, start)) start += char_length(text, start);
          if (n.right) end -= trailing_whitespace(std::string_view(text).substr(start, end - start));
          text = text.substr(start, end - start);
          break;
        }
        default: text = normal_form(n.kind, text);
      }
    }
    return text;
  }

  // tokenizers' Precompiled: per grapheme, one under 6 bytes replaced whole
  // by its shortest key's replacement, else character by character.
  std::string precompiled(const PrecompiledCharsmap& charsmap, const std::string& text) const {
    if (charsmap.empty() || text.empty()) return text;
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::BreakIterator> graphemes(
        icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
    if (U_FAILURE(status)) throw Error(fmt::format("ICU: no grapheme iterator ({})", u_errorName(status)));
    const auto wide = to_icu(text);
    graphemes->setText(wide);
    std::string out;
    for (int32_t start = graphemes->first(), end = graphemes->next(); end != icu::BreakIterator::DONE;
         start = end, end = graphemes->next()) {
      const std::string grapheme = from_icu(wide.tempSubStringBetween(start, end));
      if (grapheme.size() < 6) {
        if (const auto whole = charsmap.shortest_prefix(grapheme, source)) {
          out += *whole;
          continue;
        }
      }
      for (std::size_t at = 0; at < grapheme.size();) {
        const auto length = char_length(grapheme, at);
        const std::string_view one = std::string_view(grapheme).substr(at, length);
        const auto replaced = charsmap.shortest_prefix(one, source);
        out += replaced ? *replaced : one;
        at += length;
      }
    }
    return out;
  }

  static std::string normal_form(Normalizer::Kind kind, const std::string& text) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* normalizer = kind == Normalizer::Kind::Nfc    ? icu::Normalizer2::getNFCInstance(status)
                                         : kind == Normalizer::Kind::Nfkc ? icu::Normalizer2::getNFKCInstance(status)
                                         : kind == Normalizer::Kind::Nfd  ? icu::Normalizer2::getNFDInstance(status)
                                                                          : icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) throw Error(fmt::format("ICU: no normalizer ({})", u_errorName(status)));
    const auto result = normalizer->normalize(to_icu(text), status);
    if (U_FAILURE(status)) throw Error(fmt::format("ICU: normalisation failed ({})", u_errorName(status)));
    return from_icu(result);
  }

  std::vector<Word> pre_tokenize(Word whole) const {
    std::vector<Word> words{std::move(whole)};
    for (const auto& p : pre_tokenizers) {
      std::vector<Word> next;
      for (auto& word : words) {
        const std::string_view text = word.text;
        if (p.kind == PreTokenizer::Kind::WhitespaceSplit) {
          for (std::size_t at = 0; at < text.size();) {
            if (whitespace_at(text, at)) {
              at += char_length(text, at);
              continue;
            }
            std::size_t end = at;
            while (end < text.size() && !whitespace_at(text, end)) end += char_length(text, end);
            next.push_back({std::string(text.substr(at, end - at)), word.at_start && at == 0});
            at = end;
          }
          continue;
        }
        std::string replaced;
        for (const char c : text) {
          if (c == ' ')
            replaced += p.replacement;
          else
            replaced += c;
        }
        const bool prepend =
            p.prepend == PreTokenizer::Prepend::Always || (p.prepend == PreTokenizer::Prepend::First && word.at_start);
        if (prepend && replaced.rfind(p.replacement, 0) != 0) replaced.insert(0, p.replacement);
        if (!p.split) {
          next.push_back({std::move(replaced), word.at_start});
          continue;
        }
        // Split before each replacement, which starts the piece after it.
        std::size_t start = 0;
        for (std::size_t found = replaced.find(p.replacement, 1); found != std::string::npos;
             found = replaced.find(p.replacement, found + 1)) {
          if (found <= start) continue;
          next.push_back({replaced.substr(start, found - start), word.at_start && start == 0});
          start = found;
        }
        if (start < replaced.size()) next.push_back({replaced.substr(start), word.at_start && start == 0});
      }
      words = std::move(next);
    }
    return words;
  }

  // The Unigram model on one pre-token: tokenizers' encode_optimized, then
  // each piece's id (unknown runs fused, byte fallback where asked).
  void model_encode(std::string_view text, std::vector<int>& out) const {
    struct Best {
      int id = -1;
      double score = 0;
      long start = -1;
    };
    const std::size_t size = text.size();
    if (size == 0) return;
    const double unknown_score = min_score - kUnknownPenalty;
    std::vector<Best> best(size + 1);
    for (std::size_t start = 0; start < size;) {
      const double till_here = best[start].score;
      const std::size_t length_of_char = char_length(text, start);
      bool has_single = false;
      for (std::size_t length = 1; length <= std::min(longest, size - start); ++length) {
        const auto found = ids.find(text.substr(start, length));
        if (found == ids.end()) continue;
        const double candidate = scores[static_cast<std::size_t>(found->second)] + till_here;
        Best& target = best[start + length];
        if (target.start == -1 || candidate > target.score) target = {found->second, candidate, long(start)};
        if (length == length_of_char) has_single = true;
      }
      if (!has_single) {
        if (unk < 0) refuse("a character no piece covers, and no unk_id");
        Best& target = best[start + length_of_char];
        const double candidate = unknown_score + till_here;
        if (target.start == -1 || candidate > target.score) target = {unk, candidate, long(start)};
      }
      start += length_of_char;
    }
    std::vector<std::string_view> path;  // back to front, unknown runs fused
    for (std::size_t end = size; end > 0;) {
      const Best& node = best[end];
      const auto start = static_cast<std::size_t>(node.start);
      std::size_t run_start = start;
      if (node.id == unk) {
        while (run_start > 0 && best[run_start].id == unk) run_start = static_cast<std::size_t>(best[run_start].start);
      }
      path.push_back(text.substr(run_start, end - run_start));
      end = run_start;
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      if (const auto found = ids.find(*it); found != ids.end()) {
        out.push_back(found->second);
        continue;
      }
      std::vector<int> bytes;
      if (byte_fallback) {
        for (const char byte : *it) {
          const auto piece = ids.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(byte)));
          if (piece == ids.end()) break;
          bytes.push_back(piece->second);
        }
      }
      if (byte_fallback && bytes.size() == it->size())
        out.insert(out.end(), bytes.begin(), bytes.end());
      else
        out.push_back(unk);
    }
  }

  void encode_segment(std::string_view segment, bool at_start, std::vector<int>& out) const {
    if (segment.empty()) return;
    for (const auto& word : pre_tokenize({normalize(std::string(segment)), at_start})) model_encode(word.text, out);
  }
};

HuggingFaceTokenizer::HuggingFaceTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

HuggingFaceTokenizer HuggingFaceTokenizer::load(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->source = path;
  if (const auto why = unreadable_file_reason(path); !why.empty()) impl->refuse(why);
  const auto doc = nlohmann::json::parse(read_whole_file(path), nullptr, false);
  if (!doc.is_object()) impl->refuse("not a JSON object (a tokenizers file, tokenizer.json)");
  try {
    const auto& model = doc.at("model");
    const std::string type = model.value("type", std::string());
    if (type != "Unigram")
      impl->refuse(fmt::format("a {} model; only Unigram models (umT5's) are read", type.empty() ? "typeless" : type));
    for (const auto& entry : model.at("vocab")) {
      impl->pieces.push_back(entry.at(0).get<std::string>());
      impl->scores.push_back(entry.at(1).get<double>());
      impl->min_score = std::min(impl->min_score, impl->scores.back());
    }
    if (impl->pieces.empty()) impl->refuse("an empty vocab");
    for (std::size_t id = 0; id < impl->pieces.size(); ++id) {
      impl->ids.emplace(impl->pieces[id], static_cast<int>(id));
      impl->longest = std::max(impl->longest, impl->pieces[id].size());
    }
    if (model.contains("unk_id") && !model["unk_id"].is_null()) {
      impl->unk = model["unk_id"].get<int>();
      if (impl->unk < 0 || impl->unk >= static_cast<int>(impl->pieces.size()))
        impl->refuse(fmt::format("unk_id {} is not a piece of its {}", impl->unk, impl->pieces.size()));
    }
    impl->byte_fallback = model.value("byte_fallback", false);
    for (const auto& token : doc.value("added_tokens", nlohmann::json::array())) {
      AddedToken added{token.at("content").get<std::string>(), token.at("id").get<int>(), token.value("lstrip", false),
                       token.value("rstrip", false)};
      if (token.value("single_word", false))
        impl->refuse(fmt::format("added token \"{}\" is single_word, which is not read", added.content));
      if (!added.content.empty()) impl->added.push_back(std::move(added));
    }
    std::stable_sort(impl->added.begin(), impl->added.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    if (doc.contains("normalizer") && !doc["normalizer"].is_null()) impl->add_normalizer(doc["normalizer"]);
    if (doc.contains("pre_tokenizer") && !doc["pre_tokenizer"].is_null()) impl->add_pre_tokenizer(doc["pre_tokenizer"]);
  } catch (const nlohmann::json::exception& e) {
    impl->refuse(fmt::format("not a tokenizers file of a Unigram model ({})", e.what()));
  }
  return HuggingFaceTokenizer(std::move(impl));
}

std::vector<int> HuggingFaceTokenizer::encode(const std::string& text) const {
  const Impl& m = *impl_;
  std::vector<int> out;
  std::size_t segment = 0;  // where the text since the last added token starts
  for (std::size_t at = 0; at < text.size();) {
    const AddedToken* match = nullptr;
    for (const auto& token : m.added)  // the longest first
      if (text.compare(at, token.content.size(), token.content) == 0) {
        match = &token;
        break;
      }
    if (!match) {
      at += char_length(text, at);
      continue;
    }
    std::string_view before = std::string_view(text).substr(segment, at - segment);
    if (match->lstrip) before.remove_suffix(trailing_whitespace(before));
    m.encode_segment(before, segment == 0 && !before.empty() && !whitespace_at(before, 0), out);
    out.push_back(match->id);
    at += match->content.size();
    if (match->rstrip)
      while (at < text.size() && whitespace_at(text, at)) at += char_length(text, at);
    segment = at;
  }
  const std::string_view rest = std::string_view(text).substr(segment);
  m.encode_segment(rest, segment == 0 && !rest.empty() && !whitespace_at(rest, 0), out);
  return out;
}

int HuggingFaceTokenizer::id_of(const std::string& token) const {
  for (const auto& added : impl_->added)
    if (added.content == token) return added.id;
  const auto found = impl_->ids.find(token);
  return found == impl_->ids.end() ? -1 : found->second;
}

int HuggingFaceTokenizer::size() const { return static_cast<int>(impl_->pieces.size()); }

}  // namespace wt::wan
