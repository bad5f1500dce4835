// SentencePiece's precompiled character map: the normalisation rules of a
// model (umT5's nmt_nfkc: NFKC and SentencePiece's own), as spiece.model
// keeps them (NormalizerSpec.precompiled_charsmap) and as tokenizer.json's
// Precompiled normalizer keeps them (base64 of the same bytes): a 4-byte
// size, a darts-clone double array over UTF-8 bytes, then the
// NUL-terminated replacements its values index.
//
// SentencePiece replaces the longest key at each position; Hugging Face
// tokenizers the shortest key that starts a grapheme, for the whole
// grapheme: both lookups are here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wt::wan {

class PrecompiledCharsmap {
 public:
  PrecompiledCharsmap() = default;  // no rules: nothing matches

  // nullopt when `blob` is not such a table (too short, a size past its end).
  static std::optional<PrecompiledCharsmap> parse(std::string_view blob);

  bool empty() const { return units_.empty(); }

  // The longest key at the start of `text`: its replacement and its length
  // in bytes; {{}, 0} when no key starts `text`. `source` names the model in
  // the UsageError of a table whose values point nowhere.
  std::pair<std::string_view, std::size_t> longest_prefix(std::string_view text, const std::string& source) const;
  // The shortest key at the start of `text`: its replacement, or nullopt.
  std::optional<std::string_view> shortest_prefix(std::string_view text, const std::string& source) const;

 private:
  // Each key that starts `text`, shortest first, as (length, value); stops
  // when `visit` returns true.
  template <typename Visit>
  void prefixes(std::string_view text, Visit visit) const;
  std::string_view replacement(uint32_t value, const std::string& source) const;

  std::vector<uint32_t> units_;
  std::string text_;
};

}  // namespace wt::wan
