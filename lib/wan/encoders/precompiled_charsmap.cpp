#include "wantrain/wan/encoders/precompiled_charsmap.hpp"

#include <fmt/format.h>

#include "wantrain/util/error.hpp"

namespace wt::wan {

std::optional<PrecompiledCharsmap> PrecompiledCharsmap::parse(std::string_view blob) {
  PrecompiledCharsmap map;
  if (blob.empty()) return map;
  uint32_t trie_size = 0;
  if (blob.size() <= 4) return std::nullopt;
  for (int k = 3; k >= 0; --k) trie_size = (trie_size << 8) | static_cast<unsigned char>(blob[k]);
  if (trie_size > blob.size() - 4 || trie_size % 4 != 0) return std::nullopt;
  map.units_.resize(trie_size / 4);
  for (std::size_t u = 0; u < map.units_.size(); ++u) {
    uint32_t unit = 0;
    for (int k = 3; k >= 0; --k) unit = (unit << 8) | static_cast<unsigned char>(blob[4 + 4 * u + k]);
    map.units_[u] = unit;
  }
  map.text_ = std::string(blob.substr(4 + trie_size));
  return map;
}

template <typename Visit>
void PrecompiledCharsmap::prefixes(std::string_view text, Visit visit) const {
  if (units_.empty()) return;
  const auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  const auto units = units_.size();
  std::size_t id = offset(units_[0]);
  for (std::size_t k = 0; k < text.size(); ++k) {
    const auto label = static_cast<unsigned char>(text[k]);
    id ^= label;
    if (id >= units) return;
    const uint32_t unit = units_[id];
    if ((unit & ((1u << 31) | 0xFF)) != label) return;
    id ^= offset(unit);
    if ((unit >> 8) & 1) {  // a key ends here: its value sits in the leaf unit
      if (id >= units) return;
      if (visit(k + 1, units_[id] & ((1u << 31) - 1))) return;
    }
  }
}

std::string_view PrecompiledCharsmap::replacement(uint32_t value, const std::string& source) const {
  const auto end = value < text_.size() ? text_.find('\0', value) : std::string::npos;
  if (end == std::string::npos)
    throw UsageError(fmt::format("tokenizer model {}: its normalisation table is corrupt", source));
  return std::string_view(text_).substr(value, end - value);
}

std::pair<std::string_view, std::size_t> PrecompiledCharsmap::longest_prefix(std::string_view text,
                                                                             const std::string& source) const {
  std::size_t longest = 0;
  uint32_t value = 0;
  prefixes(text, [&](std::size_t length, uint32_t v) {
    longest = length;
    value = v;
    return false;
  });
  if (longest == 0) return {{}, 0};
  return {replacement(value, source), longest};
}

std::optional<std::string_view> PrecompiledCharsmap::shortest_prefix(std::string_view text,
                                                                     const std::string& source) const {
  std::optional<uint32_t> value;
  prefixes(text, [&](std::size_t, uint32_t v) {
    value = v;
    return true;
  });
  if (!value) return std::nullopt;
  return replacement(*value, source);
}

}  // namespace wt::wan
