#include "wantrain/wan/encoders/prompt_text.hpp"

#include <fmt/format.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>
#include <sstream>
#include <unordered_map>

#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

// Text is handled as code points, as Python handles str.
using Text = std::u32string;

// ---- UTF-8 ------------------------------------------------------------------

// The length of the well-formed UTF-8 sequence at `at`, or 0.
std::size_t utf8_sequence_length(const std::string& s, std::size_t at) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length;
  char32_t code, min;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, code = lead & 0x1F, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, code = lead & 0x0F, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, code = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (at + length > s.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(at + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(at + k) & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

Text decode(const std::string& utf8, const char* what) {
  if (const auto bad = invalid_utf8_offset(utf8); bad != std::string::npos)
    throw UsageError(fmt::format("{} is not valid UTF-8 (byte {})", what, bad));
  Text text;
  text.reserve(utf8.size());
  for (std::size_t at = 0; at < utf8.size();) {
    const std::size_t length = utf8_sequence_length(utf8, at);
    const auto lead = static_cast<unsigned char>(utf8[at]);
    char32_t code = length == 1 ? lead : length == 2 ? (lead & 0x1F) : length == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (std::size_t k = 1; k < length; ++k) code = (code << 6) | (static_cast<unsigned char>(utf8[at + k]) & 0x3F);
    text.push_back(code);
    at += length;
  }
  return text;
}

std::string encode(const Text& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// ---- ICU: normalisation and upper case ---------------------------------------

icu::UnicodeString to_icu(const Text& text) {
  return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(text.data()),
                                       static_cast<int32_t>(text.size()));
}

Text text_from_icu(const icu::UnicodeString& text) {
  Text out(static_cast<std::size_t>(text.countChar32()), U'\0');
  UErrorCode status = U_ZERO_ERROR;
  text.toUTF32(reinterpret_cast<UChar32*>(out.data()), static_cast<int32_t>(out.size()), status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU: UTF-32 conversion failed ({})", u_errorName(status)));
  return out;
}

enum class Form { nfc, nfkc };

Text normalize(const Text& text, Form form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer =
      form == Form::nfc ? icu::Normalizer2::getNFCInstance(status) : icu::Normalizer2::getNFKCInstance(status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU: no normalizer ({})", u_errorName(status)));
  const auto source = to_icu(text);
  if (normalizer->isNormalized(source, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  const auto result = normalizer->normalize(source, status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU: normalisation failed ({})", u_errorName(status)));
  return text_from_icu(result);
}

// Python's str.upper(): full case mapping (ß -> SS).
Text upper(const Text& text) {
  auto value = to_icu(text);
  value.toUpper(icu::Locale::getRoot());
  return text_from_icu(value);
}

// ---- HTML entities -----------------------------------------------------------

// name=code[,code] (hexadecimal); '*' marks the names HTML also reads
// without the ';' ("&amp" and "&ampx" -> "&x"). The HTML 4 names, &apos;,
// the upper-case forms HTML5 defines, and the HTML5 names that begin with
// a name valid without ';'.
constexpr const char* kEntityTable =
    "AElig=C6* AMP=26* Aacute=C1* Acirc=C2* Agrave=C0* Alpha=391 Aring=C5* Atilde=C3* Auml=C4* "
    "Beta=392 COPY=A9* Ccedil=C7* Chi=3A7 Dagger=2021 Delta=394 ETH=D0* Eacute=C9* Ecirc=CA* "
    "Egrave=C8* Epsilon=395 Eta=397 Euml=CB* GT=3E* Gamma=393 Iacute=CD* Icirc=CE* Igrave=CC* "
    "Iota=399 Iuml=CF* Kappa=39A LT=3C* Lambda=39B Mu=39C Ntilde=D1* Nu=39D OElig=152 Oacute=D3* "
    "Ocirc=D4* Ograve=D2* Omega=3A9 Omicron=39F Oslash=D8* Otilde=D5* Ouml=D6* Phi=3A6 Pi=3A0 "
    "Prime=2033 Psi=3A8 QUOT=22* REG=AE* Rho=3A1 Scaron=160 Sigma=3A3 THORN=DE* Tau=3A4 Theta=398 "
    "Uacute=DA* Ucirc=DB* Ugrave=D9* Upsilon=3A5 Uuml=DC* Xi=39E Yacute=DD* Yuml=178 Zeta=396 "
    "aacute=E1* acirc=E2* acute=B4* aelig=E6* agrave=E0* alefsym=2135 alpha=3B1 amp=26* and=2227 "
    "ang=2220 apos=27 aring=E5* asymp=2248 atilde=E3* auml=E4* bdquo=201E beta=3B2 brvbar=A6* "
    "bull=2022 cap=2229 ccedil=E7* cedil=B8* cent=A2* centerdot=B7 chi=3C7 circ=2C6 clubs=2663 "
    "cong=2245 copy=A9* copysr=2117 crarr=21B5 cup=222A curren=A4* dArr=21D3 dagger=2020 "
    "darr=2193 deg=B0* delta=3B4 diams=2666 divide=F7* divideontimes=22C7 eacute=E9* ecirc=EA* "
    "egrave=E8* empty=2205 emsp=2003 ensp=2002 epsilon=3B5 equiv=2261 eta=3B7 eth=F0* euml=EB* "
    "euro=20AC exist=2203 fnof=192 forall=2200 frac12=BD* frac14=BC* frac34=BE* frasl=2044 "
    "gamma=3B3 ge=2265 gt=3E* gtcc=2AA7 gtcir=2A7A gtdot=22D7 gtlPar=2995 gtquest=2A7C "
    "gtrapprox=2A86 gtrarr=2978 gtrdot=22D7 gtreqless=22DB gtreqqless=2A8C gtrless=2277 "
    "gtrsim=2273 hArr=21D4 harr=2194 hearts=2665 hellip=2026 iacute=ED* icirc=EE* iexcl=A1* "
    "igrave=EC* image=2111 infin=221E int=222B iota=3B9 iquest=BF* isin=2208 iuml=EF* kappa=3BA "
    "lArr=21D0 lambda=3BB lang=27E8 laquo=AB* larr=2190 lceil=2308 ldquo=201C le=2264 "
    "lfloor=230A lowast=2217 loz=25CA lrm=200E lsaquo=2039 lsquo=2018 lt=3C* ltcc=2AA6 "
    "ltcir=2A79 ltdot=22D6 lthree=22CB ltimes=22C9 ltlarr=2976 ltquest=2A7B ltrPar=2996 "
    "ltri=25C3 ltrie=22B4 ltrif=25C2 macr=AF* mdash=2014 micro=B5* middot=B7* minus=2212 mu=3BC "
    "nabla=2207 nbsp=A0* ndash=2013 ne=2260 ni=220B not=AC* notin=2209 notindot=22F5,338 "
    "notinE=22F9,338 notinva=2209 notinvb=22F7 notinvc=22F6 notni=220C notniva=220C "
    "notnivb=22FE notnivc=22FD nsub=2284 ntilde=F1* nu=3BD oacute=F3* ocirc=F4* oelig=153 "
    "ograve=F2* oline=203E omega=3C9 omicron=3BF oplus=2295 or=2228 ordf=AA* ordm=BA* oslash=F8* "
    "otilde=F5* otimes=2297 ouml=F6* para=B6* parallel=2225 part=2202 permil=2030 perp=22A5 "
    "phi=3C6 pi=3C0 piv=3D6 plusmn=B1* pound=A3* prime=2032 prod=220F prop=221D psi=3C8 "
    "quot=22* rArr=21D2 radic=221A rang=27E9 raquo=BB* rarr=2192 rceil=2309 rdquo=201D real=211C "
    "reg=AE* rfloor=230B rho=3C1 rlm=200F rsaquo=203A rsquo=2019 sbquo=201A scaron=161 sdot=22C5 "
    "sect=A7* shy=AD* sigma=3C3 sigmaf=3C2 sim=223C spades=2660 sub=2282 sube=2286 sum=2211 "
    "sup=2283 sup1=B9* sup2=B2* sup3=B3* supe=2287 szlig=DF* tau=3C4 there4=2234 theta=3B8 "
    "thetasym=3D1 thinsp=2009 thorn=FE* tilde=2DC times=D7* timesb=22A0 timesbar=2A31 "
    "timesd=2A30 trade=2122 uArr=21D1 uacute=FA* uarr=2191 ucirc=FB* ugrave=F9* uml=A8* "
    "upsih=3D2 upsilon=3C5 uuml=FC* weierp=2118 xi=3BE yacute=FD* yen=A5* yuml=FF* zeta=3B6 "
    "zwj=200D zwnj=200C";

struct Entity {
  Text value;
  bool without_semicolon = false;  // also read without the ';'
};

const std::unordered_map<std::string, Entity>& entities() {
  static const auto table = [] {
    std::unordered_map<std::string, Entity> map;
    std::istringstream in(kEntityTable);
    std::string item;
    while (in >> item) {
      const auto equals = item.find('=');
      Entity entity;
      std::string codes = item.substr(equals + 1);
      if (codes.back() == '*') {
        entity.without_semicolon = true;
        codes.pop_back();
      }
      std::istringstream parts(codes);
      std::string code;
      while (std::getline(parts, code, ','))
        entity.value.push_back(static_cast<char32_t>(std::stoul(code, nullptr, 16)));
      map.emplace(item.substr(0, equals), std::move(entity));
    }
    return map;
  }();
  return table;
}

// The entity called `name` (code points; entity names are ASCII), or null.
const Entity* find_entity(const Text& name, bool without_semicolon) {
  std::string ascii;
  for (const char32_t c : name) {
    if (c >= 0x80) return nullptr;
    ascii += static_cast<char>(c);
  }
  const auto& table = entities();
  const auto found = table.find(ascii);
  if (found == table.end() || (without_semicolon && !found->second.without_semicolon)) return nullptr;
  return &found->second;
}

bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_hex(char32_t c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_ascii_alnum(char32_t c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Windows-1252 for the C1 range, undefined bytes kept (what both Python's
// html module and ftfy's "sloppy" codec read 0x80-0x9F as).
constexpr std::array<char32_t, 32> kWindows1252C1 = {0x20AC, 0x81,   0x201A, 0x192,  0x201E, 0x2026, 0x2020, 0x2021,
                                                     0x2C6,  0x2030, 0x160,  0x2039, 0x152,  0x8D,   0x17D,  0x8F,
                                                     0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
                                                     0x2DC,  0x2122, 0x161,  0x203A, 0x153,  0x9D,   0x17E,  0x178};

// A numeric character reference's text, as Python's html module gives it.
Text character_reference(char32_t code) {
  if (code == 0) return U"\uFFFD";
  if (code == 0x0D) return U"\r";
  if (code >= 0x80 && code <= 0x9F) return Text(1, kWindows1252C1[code - 0x80]);
  if ((code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return U"\uFFFD";
  const bool dropped = (code >= 0x01 && code <= 0x08) || code == 0x0B || (code >= 0x0E && code <= 0x1F) ||
                       code == 0x7F || (code >= 0xFDD0 && code <= 0xFDEF) || (code & 0xFFFE) == 0xFFFE;
  return dropped ? Text() : Text(1, code);
}

// Python's html.unescape.
Text unescape(const Text& text) {
  if (text.find(U'&') == Text::npos) return text;
  Text out;
  out.reserve(text.size());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (text[i] != U'&') {
      out += text[i++];
      continue;
    }
    std::size_t k = i + 1;
    if (k < n && text[k] == U'#') {  // &#123; or &#x7b; (the ';' optional)
      ++k;
      const bool hex = k + 1 < n && (text[k] == U'x' || text[k] == U'X') && is_ascii_hex(text[k + 1]);
      if (hex) ++k;
      const std::size_t digits = k;
      char32_t code = 0;
      while (k < n && (hex ? is_ascii_hex(text[k]) : is_ascii_digit(text[k]))) {
        const char32_t c = text[k++];
        const unsigned value = is_ascii_digit(c) ? c - U'0' : (c | 0x20) - U'a' + 10;
        code = code > 0x10FFFF ? code : code * (hex ? 16 : 10) + value;  // saturates past the range
      }
      if (k == digits) {  // "&#" and no digits: not a reference
        out += text[i++];
        continue;
      }
      if (k < n && text[k] == U';') ++k;
      out += character_reference(code);
      i = k;
      continue;
    }
    // A name: up to 32 characters other than these, then an optional ';'.
    static const Text kStops = U"\t\n\f <&#;";
    while (k < n && k - (i + 1) < 32 && kStops.find(text[k]) == Text::npos) ++k;
    if (k == i + 1) {
      out += text[i++];
      continue;
    }
    const Text name = text.substr(i + 1, k - (i + 1));
    const bool semicolon = k < n && text[k] == U';';
    if (semicolon) ++k;
    if (const Entity* entity = find_entity(name, /*without_semicolon=*/!semicolon)) {
      out += entity->value;
    } else {
      // The longest shorter prefix (2 characters or more) that is a name
      // valid without ';', the rest kept ("&notit;" -> "¬it;").
      const Text reference = text.substr(i + 1, k - (i + 1));  // the name and its ';'
      const Entity* prefix = nullptr;
      std::size_t length = reference.size() - 1;
      for (; length >= 2; --length)
        if ((prefix = find_entity(reference.substr(0, length), /*without_semicolon=*/true))) break;
      if (prefix) {
        out += prefix->value;
        out += reference.substr(length);
      } else {
        out += U'&';
        out += reference;
      }
    }
    i = k;
  }
  return out;
}

// ---- ftfy.fix_text's ordinary-text fixes ------------------------------------

// ftfy's entity step: "&name;" and "&#...;" only (1-24 letters or digits,
// the ';' required), and the all-capitals form of a lower-case name when
// that form means nothing itself ("&EACUTE;" -> "É").
Text unescape_strict(const Text& text) {
  if (text.find(U'&') == Text::npos) return text;
  Text out;
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (text[i] != U'&') {
      out += text[i++];
      continue;
    }
    const bool numeric = i + 1 < n && text[i + 1] == U'#';
    const std::size_t start = i + 1 + (numeric ? 1 : 0);
    std::size_t k = start;
    while (k < n && k - start < 24 && is_ascii_alnum(text[k])) ++k;
    if (k == start || k >= n || text[k] != U';') {
      out += text[i++];
      continue;
    }
    const Text reference = text.substr(i, k + 1 - i);
    const Text name = text.substr(start, k - start);
    Text replacement = reference;
    if (numeric) {
      const Text decoded = unescape(reference);
      if (decoded.find(U';') == Text::npos) replacement = decoded;
    } else if (const Entity* entity = find_entity(name, false)) {
      replacement = entity->value;
    } else {
      Text lower = name;
      bool has_upper = false;
      for (auto& c : lower)
        if (c >= U'A' && c <= U'Z') c = c - U'A' + U'a', has_upper = true;
      bool all_upper = has_upper;
      for (const char32_t c : name) all_upper = all_upper && !(c >= U'a' && c <= U'z');
      const Entity* lower_case = all_upper ? find_entity(lower, false) : nullptr;
      if (lower_case && unescape(reference) == reference) replacement = upper(lower_case->value);
    }
    out += replacement;
    i = k + 1;
  }
  return out;
}

// A code point -> text map applied character by character.
Text translate(const Text& text, const std::unordered_map<char32_t, Text>& map) {
  Text out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    const auto found = map.find(c);
    if (found == map.end()) {
      out += c;
    } else {
      out += found->second;
    }
  }
  return out;
}

const std::unordered_map<char32_t, Text>& ligatures() {
  static const std::unordered_map<char32_t, Text> map = {
      {0x0132, U"IJ"},      {0x0133, U"ij"},      {0x0149, U"\u02BCn"}, {0x01F1, U"DZ"},      {0x01F2, U"Dz"},
      {0x01F3, U"dz"},      {0x01C4, U"D\u017D"}, {0x01C5, U"D\u017E"}, {0x01C6, U"d\u017E"}, {0x01C7, U"LJ"},
      {0x01C8, U"Lj"},      {0x01C9, U"lj"},      {0x01CA, U"NJ"},      {0x01CB, U"Nj"},      {0x01CC, U"nj"},
      {0xFB00, U"ff"},      {0xFB01, U"fi"},      {0xFB02, U"fl"},      {0xFB03, U"ffi"},     {0xFB04, U"ffl"},
      {0xFB05, U"\u017Ft"}, {0xFB06, U"st"}};
  return map;
}

// Full- and half-width forms (U+FF01-U+FFEF) -> their NFKC form; U+3000 -> ' '.
const std::unordered_map<char32_t, Text>& widths() {
  static const auto map = [] {
    std::unordered_map<char32_t, Text> result{{0x3000, U" "}};
    for (char32_t c = 0xFF01; c < 0xFFF0; ++c) {
      const Text alone(1, c), standard = normalize(alone, Form::nfkc);
      if (standard != alone) result.emplace(c, standard);
    }
    return result;
  }();
  return map;
}

Text fix_c1_controls(Text text) {
  for (auto& c : text)
    if (c >= 0x80 && c <= 0x9F) c = kWindows1252C1[c - 0x80];
  return text;
}

Text uncurl_quotes(Text text) {
  for (auto& c : text) {
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) c = U'\'';
    if (c >= 0x201C && c <= 0x201F) c = U'"';
  }
  return text;
}

Text fix_line_breaks(const Text& text) {
  Text out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == U'\r' && i + 1 < text.size() && text[i + 1] == U'\n') continue;  // CR LF -> LF
    out += (c == U'\r' || c == 0x2028 || c == 0x2029 || c == 0x85) ? U'\n' : c;
  }
  return out;
}

// ESC '[' (digits or ';')* letter: terminal colour and cursor codes.
Text remove_terminal_escapes(const Text& text) {
  Text out;
  out.reserve(text.size());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    if (text[i] == 0x1B && i + 1 < n && text[i + 1] == U'[') {
      std::size_t k = i + 2;
      while (k < n && (text[k] == U';' || u_charType(static_cast<UChar32>(text[k])) == U_DECIMAL_DIGIT_NUMBER)) ++k;
      if (k < n && ((text[k] >= U'a' && text[k] <= U'z') || (text[k] >= U'A' && text[k] <= U'Z'))) {
        i = k + 1;
        continue;
      }
    }
    out += text[i++];
  }
  return out;
}

bool is_removed_control(char32_t c) {
  return c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || (c >= 0x206A && c <= 0x206F) ||
         c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC);
}

Text remove_control_chars(const Text& text) {
  Text out;
  out.reserve(text.size());
  for (const char32_t c : text)
    if (!is_removed_control(c)) out += c;
  return out;
}

// One line, fixed until nothing changes (ftfy repeats its steps so that
// fixing twice changes nothing: "&amp;amp;" becomes "&").
Text fix_segment(Text text, bool entities) {
  // Each step only removes or replaces with shorter or final forms; the cap
  // only guards against a cycle no step is known to make.
  for (int round = 0; round < 64; ++round) {
    const Text before = text;
    if (entities) text = unescape_strict(text);
    text = fix_c1_controls(std::move(text));
    text = translate(text, ligatures());
    text = translate(text, widths());
    text = uncurl_quotes(std::move(text));
    text = fix_line_breaks(text);
    text = remove_terminal_escapes(text);
    text = remove_control_chars(text);
    text = normalize(text, Form::nfc);
    if (text == before) break;
  }
  return text;
}

// ftfy.fix_text: line by line (each line keeps its '\n'); entities are left
// alone from the first line holding a '<' on (it may be HTML).
Text fix_text(const Text& text) {
  Text out;
  bool entities = true;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t newline = text.find(U'\n', start);
    const std::size_t end = newline == Text::npos ? text.size() : newline + 1;
    const Text line = text.substr(start, end - start);
    if (line.find(U'<') != Text::npos) entities = false;
    out += fix_segment(line, entities);
    start = end;
  }
  return out;
}

// Unicode White_Space: what `\s` matches in the `regex` module Wan uses.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.strip() also strips U+001C-U+001F.
bool is_python_space(char32_t c) { return is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

Text strip(const Text& text, bool (*space)(char32_t)) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && space(text[begin])) ++begin;
  while (end > begin && space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

Text collapse_white_space(const Text& text) {
  Text out;
  out.reserve(text.size());
  bool in_space = false;
  for (const char32_t c : text) {
    if (is_white_space(c)) {
      if (!in_space) out += U' ';
      in_space = true;
    } else {
      out += c;
      in_space = false;
    }
  }
  return strip(out, is_white_space);
}

}  // namespace

std::size_t invalid_utf8_offset(const std::string& text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    if (length == 0) return at;
    at += length;
  }
  return std::string::npos;
}

std::string unescape_html(const std::string& utf8) { return encode(unescape(decode(utf8, "the text"))); }

std::string clean_prompt(const std::string& utf8) {
  Text text = fix_text(decode(utf8, "the prompt"));
  text = strip(unescape(unescape(text)), is_python_space);
  return encode(collapse_white_space(text));
}

}  // namespace wt::wan
