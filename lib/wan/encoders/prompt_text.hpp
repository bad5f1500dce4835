// Wan's prompt cleaning for the umT5 tokenizer: the official
// wan/modules/tokenizers.py HuggingfaceTokenizer with clean='whitespace'
// (what wan/modules/t5.py T5EncoderModel uses), without Python:
//
//   basic_clean:      ftfy.fix_text, then html.unescape twice, then strip
//   whitespace_clean: every run of Unicode whitespace -> one space, strip
//
// ftfy.fix_text (6.x, default settings) is followed in its ordinary-text
// part: the text is cut into lines, and each line is fixed until nothing
// changes: HTML entities ending in ';' decoded (not in a line that holds a
// '<', nor in any line after it), C1 controls read as Windows-1252, Latin
// ligatures split (ﬁ -> fi), full- and half-width forms made standard
// (U+3000 -> space), curly quotes straightened (‘ ’ ‚ ‛ ʼ -> ', “ ” „ ‟ ->
// "), line breaks made '\n', terminal colour codes and unwanted control
// characters removed, NFC normalisation (ICU). Not done: ftfy's mojibake
// repair (fix_encoding: "cafÃ©" -> "café"), which needs its character
// statistics; correctly encoded text is left alone by it anyway.
//
// HTML entities: every numeric reference as Python decodes it, and named
// ones from a table of the HTML 4 names (the Latin-1 letters and symbols,
// Greek, typographic punctuation: &amp; &nbsp; &eacute; &rsquo; &mdash;
// ...), &apos;, and every HTML5 name that begins with a name valid without
// ';' (&notin;, &ltimes;, so that the longest-prefix rule never misreads
// them). Other HTML5-only names (&check;, &Jscr;) stay as written, where
// Python would decode them.
#pragma once

#include <cstddef>
#include <string>

namespace wt::wan {

// The offset of the first byte that is not part of well-formed UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included), or
// std::string::npos.
std::size_t invalid_utf8_offset(const std::string& text);
inline bool is_valid_utf8(const std::string& text) { return invalid_utf8_offset(text) == std::string::npos; }

// Python's html.unescape on UTF-8 text (named entities from the table
// above). UsageError when `utf8` is not valid UTF-8.
std::string unescape_html(const std::string& utf8);

// The prompt as Wan's tokenizer sees it (see above). UsageError when `utf8`
// is not valid UTF-8: callers reject such captions before, naming them.
std::string clean_prompt(const std::string& utf8);

}  // namespace wt::wan
