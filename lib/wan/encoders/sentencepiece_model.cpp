#include "wantrain/wan/encoders/sentencepiece_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <unordered_map>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/wan/encoders/precompiled_charsmap.hpp"

namespace wt::wan {
namespace {

// ModelProto.SentencePiece.Type (sentencepiece_model.proto).
enum PieceType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space
constexpr float kUnknownPiecePenalty = 10.0f;              // an unknown character scores min score - 10

// A malformed file: the message completes "not a SentencePiece model (...)".
struct Malformed {
  std::string what;
};

// Protobuf wire format, the little of it a ModelProto needs.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : data_(bytes) {}
  bool done() const { return at_ >= data_.size(); }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) throw Malformed{"a number runs past the end"};
      const auto byte = static_cast<unsigned char>(data_[at_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw Malformed{"a number longer than 10 bytes"};
  }
  uint32_t fixed32() {
    if (data_.size() - at_ < 4) throw Malformed{"a 4-byte value runs past the end"};
    uint32_t value = 0;
    for (int k = 3; k >= 0; --k) value = (value << 8) | static_cast<unsigned char>(data_[at_ + k]);
    at_ += 4;
    return value;
  }
  std::string_view bytes() {
    const uint64_t length = varint();
    if (length > data_.size() - at_) throw Malformed{"a field runs past the end"};
    const auto field = data_.substr(at_, length);
    at_ += length;
    return field;
  }
  // The next field's number and wire type.
  std::pair<uint64_t, int> tag() {
    const uint64_t key = varint();
    if ((key >> 3) == 0) throw Malformed{"a field numbered 0"};
    return {key >> 3, static_cast<int>(key & 7)};
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1:
        if (data_.size() - at_ < 8) throw Malformed{"an 8-byte value runs past the end"};
        at_ += 8;
        return;
      case 2: bytes(); return;
      case 5: fixed32(); return;
      default: throw Malformed{fmt::format("a field of unknown wire type {}", wire_type)};
    }
  }

 private:
  std::string_view data_;
  std::size_t at_ = 0;
};

void expect_wire(int got, int expected) {
  if (got != expected) throw Malformed{fmt::format("a field of wire type {} where {} belongs", got, expected)};
}

// SentencePiece's UTF-8 length by the lead byte alone (its OneCharLen).
std::size_t one_char_length(unsigned char lead) {
  static constexpr unsigned char kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

// The length of the well-formed UTF-8 character at the start of `text`, or
// 0 (SentencePiece's IsValidDecodeUTF8).
std::size_t valid_char_length(std::string_view text) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length;
  uint32_t code, min;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(k) & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

struct SentencePieceModel::Impl {
  std::string source;
  std::vector<std::string> pieces;  // by id
  std::vector<float> scores;
  std::vector<int> types;
  std::unordered_map<std::string_view, int> normal;    // normal, user-defined and unused pieces
  std::unordered_map<std::string_view, int> reserved;  // unknown, control and byte pieces
  std::vector<std::string_view> user_defined;          // kept as written by the normaliser
  std::size_t longest_piece = 0;                       // bytes
  int unk = -1, eos = -1, pad = -1;
  bool byte_fallback = false, treat_whitespace_as_suffix = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  float min_score = FLT_MAX, max_score = FLT_MIN;  // over normal pieces, as SentencePiece starts them

  PrecompiledCharsmap charsmap;  // the normalisation rules

  // ModelProto's fields, read from the wire (parse()).
  struct TrainerSpec {
    int model_type = 1;  // unigram, the default
    std::string eos_piece = "</s>", pad_piece = "<pad>";
  };
  void read_piece(WireReader entry);
  void read_trainer_spec(WireReader spec, TrainerSpec& trainer);
  std::string_view read_normalizer_spec(WireReader spec);  // returns the precompiled charsmap
  // The checks SentencePiece makes when it loads a model, and the lookup tables.
  void index_pieces();

  int piece_to_id(std::string_view piece) const {
    if (const auto found = reserved.find(piece); found != reserved.end()) return found->second;
    if (const auto found = normal.find(piece); found != normal.end()) return found->second;
    return unk;
  }

  // SentencePiece's NormalizePrefix: what the start of `text` becomes, and
  // how many bytes of it that consumes.
  std::pair<std::string_view, std::size_t> normalize_prefix(std::string_view text) const {
    std::size_t user = 0;
    for (const auto piece : user_defined)
      if (piece.size() > user && text.substr(0, piece.size()) == piece) user = piece.size();
    if (user > 0) return {text.substr(0, user), user};
    if (const auto match = charsmap.longest_prefix(text, source); match.second > 0) return match;
    const std::size_t length = valid_char_length(text);
    if (length == 0) return {"\xEF\xBF\xBD", 1};  // malformed: U+FFFD for one byte
    return {text.substr(0, length), length};
  }

  std::string normalize(std::string_view input) const {
    std::string out;
    if (remove_extra_whitespaces) {
      while (!input.empty()) {
        const auto prefix = normalize_prefix(input);
        if (prefix.first != " ") break;
        input.remove_prefix(prefix.second);
      }
    }
    if (input.empty()) return out;
    const auto add_space = [&] { out += escape_whitespaces ? kSpaceSymbol : std::string_view(" "); };
    if (!treat_whitespace_as_suffix && add_dummy_prefix) add_space();
    bool previous_space = remove_extra_whitespaces;
    while (!input.empty()) {
      const auto prefix = normalize_prefix(input);
      std::string_view piece = prefix.first;
      while (previous_space && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
      if (!piece.empty()) {
        for (const char c : piece) {
          if (escape_whitespaces && c == ' ') {
            out += kSpaceSymbol;
          } else {
            out += c;
          }
        }
        previous_space = piece.back() == ' ';
      }
      input.remove_prefix(prefix.second);
      if (!remove_extra_whitespaces) previous_space = false;
    }
    if (remove_extra_whitespaces) {
      const std::string_view space = escape_whitespaces ? kSpaceSymbol : std::string_view(" ");
      while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
        out.resize(out.size() - space.size());
    }
    if (treat_whitespace_as_suffix && add_dummy_prefix) add_space();
    return out;
  }

  // SentencePiece's optimised Viterbi: the best path ending at each byte
  // position, with the sums in the types SentencePiece uses (a piece's
  // score and the path's are added in double, the path kept in float).
  std::vector<std::pair<std::string_view, int>> segment(std::string_view text) const {
    struct Best {
      int id = -1;
      float score = 0;
      long start = -1;
    };
    const std::size_t size = text.size();
    const float unknown_score = min_score - kUnknownPiecePenalty;
    std::vector<Best> best(size + 1);
    for (std::size_t start = 0; start < size;) {
      const float till_here = best[start].score;
      const std::size_t char_length = std::min(one_char_length(static_cast<unsigned char>(text[start])), size - start);
      bool has_single = false;
      const std::size_t longest = std::min(longest_piece, size - start);
      for (std::size_t length = 1; length <= longest; ++length) {
        const auto found = normal.find(text.substr(start, length));
        if (found == normal.end() || types[found->second] == kUnused) continue;
        const int id = found->second;
        const double score = types[id] == kUserDefined ? static_cast<float>(length) * max_score - 0.1 : scores[id];
        const double candidate = score + till_here;
        Best& target = best[start + length];
        if (target.start == -1 || candidate > target.score) {
          target.score = static_cast<float>(candidate);
          target.start = static_cast<long>(start);
          target.id = id;
        }
        if (length == char_length) has_single = true;
      }
      if (!has_single) {
        Best& target = best[start + char_length];
        const float candidate = unknown_score + till_here;
        if (target.start == -1 || candidate > target.score) {
          target.score = candidate;
          target.start = static_cast<long>(start);
          target.id = unk;
        }
      }
      start += char_length;
    }
    std::vector<std::pair<std::string_view, int>> path;
    for (std::size_t end = size; end > 0;) {
      const Best& node = best[end];
      const auto start = static_cast<std::size_t>(node.start);
      path.emplace_back(text.substr(start, end - start), node.id);
      end = start;
    }
    std::reverse(path.begin(), path.end());
    return path;
  }
};

SentencePieceModel::SentencePieceModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

SentencePieceModel SentencePieceModel::load(const std::string& path) {
  if (const auto reason = unreadable_file_reason(path); !reason.empty())
    throw UsageError(fmt::format("tokenizer model {}: {}", path, reason));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw UsageError(fmt::format("tokenizer model {}: cannot be read", path));
  return parse(bytes, path);
}

void SentencePieceModel::Impl::read_piece(WireReader entry) {
  std::string piece;
  float score = 0;
  int type = kNormal;
  while (!entry.done()) {
    const auto [f, w] = entry.tag();
    if (f == 1) {
      expect_wire(w, 2);
      piece = std::string(entry.bytes());
    } else if (f == 2) {
      expect_wire(w, 5);
      const uint32_t raw = entry.fixed32();
      std::memcpy(&score, &raw, sizeof score);
    } else if (f == 3) {
      expect_wire(w, 0);
      type = static_cast<int>(entry.varint());
    } else {
      entry.skip(w);
    }
  }
  pieces.push_back(std::move(piece));
  scores.push_back(score);
  types.push_back(type);
}

void SentencePieceModel::Impl::read_trainer_spec(WireReader spec, TrainerSpec& trainer) {
  while (!spec.done()) {
    const auto [f, w] = spec.tag();
    if (f == 3 || f == 24 || f == 35) {
      expect_wire(w, 0);
      const uint64_t value = spec.varint();
      if (f == 3) trainer.model_type = static_cast<int>(value);
      if (f == 24) treat_whitespace_as_suffix = value != 0;
      if (f == 35) byte_fallback = value != 0;
    } else if (f == 47 || f == 48) {
      expect_wire(w, 2);
      const auto name = spec.bytes();
      if (!name.empty()) (f == 47 ? trainer.eos_piece : trainer.pad_piece) = std::string(name);
    } else {
      spec.skip(w);
    }
  }
}

std::string_view SentencePieceModel::Impl::read_normalizer_spec(WireReader spec) {
  std::string_view precompiled;
  while (!spec.done()) {
    const auto [f, w] = spec.tag();
    if (f == 2) {
      expect_wire(w, 2);
      precompiled = spec.bytes();
    } else if (f == 3 || f == 4 || f == 5) {
      expect_wire(w, 0);
      const bool value = spec.varint() != 0;
      (f == 3 ? add_dummy_prefix : f == 4 ? remove_extra_whitespaces : escape_whitespaces) = value;
    } else {
      spec.skip(w);
    }
  }
  return precompiled;
}

void SentencePieceModel::Impl::index_pieces() {
  if (pieces.empty()) throw Malformed{"no pieces"};
  std::vector<bool> bytes_found(256, false);
  for (int id = 0; id < static_cast<int>(pieces.size()); ++id) {
    const std::string_view piece = pieces[id];
    const int type = types[id];
    if (type < kNormal || type > kByte) throw Malformed{fmt::format("piece {} has unknown type {}", id, type)};
    if (piece.empty()) throw Malformed{fmt::format("piece {} is empty", id)};
    if (piece.find('\0') != std::string_view::npos) throw Malformed{fmt::format("piece {} holds a NUL", id)};
    const bool is_normal = type == kNormal || type == kUserDefined || type == kUnused;
    if (!(is_normal ? normal : reserved).emplace(piece, id).second)
      throw Malformed{fmt::format("piece {} (\"{}\") is defined twice", id, piece)};
    if (is_normal) longest_piece = std::max(longest_piece, piece.size());
    if (type == kNormal) {
      min_score = std::min(min_score, scores[id]);
      max_score = std::max(max_score, scores[id]);
    }
    if (type == kUserDefined) user_defined.push_back(piece);
    if (type == kUnknown) {
      if (unk >= 0) throw Malformed{"two unknown pieces"};
      unk = id;
    }
    if (type == kByte) {
      if (!byte_fallback) throw Malformed{fmt::format("byte piece {} without byte fallback", piece)};
      unsigned value = 256;
      if (piece.size() == 6 && piece.substr(0, 3) == "<0x" && piece[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4])) &&
          !std::islower(static_cast<unsigned char>(piece[3])) && !std::islower(static_cast<unsigned char>(piece[4])))
        value = static_cast<unsigned>(std::stoul(std::string(piece.substr(3, 2)), nullptr, 16));
      if (value > 255) throw Malformed{fmt::format("byte piece {} is invalid", piece)};
      bytes_found[value] = true;
    }
  }
  if (unk < 0) throw Malformed{"no unknown piece"};
  if (byte_fallback && std::find(bytes_found.begin(), bytes_found.end(), false) != bytes_found.end())
    throw Malformed{"byte fallback without all 256 byte pieces"};
  if (normal.empty()) throw Malformed{"no normal pieces"};
}

SentencePieceModel SentencePieceModel::parse(const std::string& bytes, const std::string& source) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  Impl::TrainerSpec trainer;
  std::string_view charsmap;
  try {
    WireReader model(bytes);
    while (!model.done()) {
      const auto [field, wire] = model.tag();
      if (field == 1) {  // pieces
        expect_wire(wire, 2);
        impl->read_piece(WireReader(model.bytes()));
      } else if (field == 2) {  // trainer_spec
        expect_wire(wire, 2);
        impl->read_trainer_spec(WireReader(model.bytes()), trainer);
      } else if (field == 3) {  // normalizer_spec
        expect_wire(wire, 2);
        charsmap = impl->read_normalizer_spec(WireReader(model.bytes()));
      } else {
        model.skip(wire);
      }
    }
    impl->index_pieces();
    const auto table = PrecompiledCharsmap::parse(charsmap);
    if (!table) throw Malformed{"its normalisation table is broken"};
    impl->charsmap = *table;
  } catch (const Malformed& malformed) {
    throw UsageError(fmt::format("tokenizer model {}: not a SentencePiece model ({})", source, malformed.what));
  }
  if (trainer.model_type != 1) {
    static const char* kTypes[] = {"", "unigram", "BPE", "word", "char"};
    const int type = trainer.model_type;
    const std::string kind = type >= 2 && type <= 4 ? kTypes[type] : std::to_string(type);
    throw UsageError(
        fmt::format("tokenizer model {}: a {} SentencePiece model; only unigram models (umT5's spiece.model) are read",
                    source, kind));
  }
  const auto control = [&](const std::string& name) {
    const int id = impl->piece_to_id(name);
    return impl->types[id] == kControl ? id : -1;
  };
  impl->eos = control(trainer.eos_piece);
  impl->pad = control(trainer.pad_piece);
  return SentencePieceModel(std::move(impl));
}

std::vector<int> SentencePieceModel::encode(const std::string& text) const {
  const std::string normalized = impl_->normalize(text);
  std::vector<int> ids;
  bool previous_unknown = false;
  for (const auto& [piece, id] : impl_->segment(normalized)) {
    const bool unknown = id == impl_->unk;
    if (unknown && impl_->byte_fallback) {
      for (const char byte : piece)
        ids.push_back(impl_->piece_to_id(fmt::format("<0x{:02X}>", static_cast<unsigned char>(byte))));
    } else if (!(unknown && previous_unknown)) {  // a run of unknown pieces is one <unk>
      ids.push_back(id);
    }
    previous_unknown = unknown;
  }
  return ids;
}

int SentencePieceModel::size() const { return static_cast<int>(impl_->pieces.size()); }
const std::string& SentencePieceModel::piece(int id) const { return impl_->pieces.at(static_cast<std::size_t>(id)); }
int SentencePieceModel::unk_id() const { return impl_->unk; }
int SentencePieceModel::eos_id() const { return impl_->eos; }
int SentencePieceModel::pad_id() const { return impl_->pad; }

}  // namespace wt::wan
