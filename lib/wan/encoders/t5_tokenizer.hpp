// The umT5 tokenizer of Wan (the official wan/modules/t5.py T5EncoderModel:
// HuggingfaceTokenizer(google/umt5-xxl, seq_len=text_len, clean='whitespace')
// called with add_special_tokens, padding to text_len, truncation): each
// prompt cleaned as Wan cleans it (prompt_text.hpp), cut into pieces, EOS
// (id 1 in umT5) appended, padded with the pad id (0) to text_len. A prompt
// of more than text_len tokens keeps its first text_len - 1 and the EOS, as
// Hugging Face's truncation does; `truncated` counts them so that a tool can
// say so. The encoder's embedding of a prompt is then cut to its length
// (the mask's row sum), as T5EncoderModel does.
//
// The pieces come from tokenizer.json when there is one, read as Hugging
// Face's tokenizers library reads it (hugging_face_tokenizer.hpp): what
// transformers' AutoTokenizer loads from the google/umt5-xxl folder for the
// official code, and from a diffusers pipeline's tokenizer/ for WanPipeline.
// Else from spiece.model, as SentencePiece cuts (sentencepiece_model.hpp);
// the two differ where text spells a special token ("</s>", "<pad>",
// "<extra_id_0>": SentencePiece reads its characters) and on characters no
// piece covers (SentencePiece's byte fallback against the <unk> that
// transformers' converted tokenizer.json gives).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/encoders/hugging_face_tokenizer.hpp"
#include "wantrain/wan/encoders/sentencepiece_model.hpp"

namespace wt::wan {

struct Tokens {
  at::Tensor ids;                     // [B, text_len] int64: the prompt's tokens, EOS last, then the pad id
  at::Tensor mask;                    // [B, text_len] int64: 1 on the tokens (EOS included), 0 on padding
  std::vector<int64_t> lengths;       // [B] tokens kept, EOS included (the mask's row sums)
  std::vector<int64_t> full_lengths;  // [B] tokens the whole prompt has, EOS included
  int truncated = 0;                  // prompts with full_length > text_len, cut to text_len
};

class T5Tokenizer {
 public:
  // `path` is tokenizer.json, spiece.model, or a folder holding either
  // (tokenizer.json first, as transformers' AutoTokenizer): the
  // google/umt5-xxl folder of a Wan repository, or a diffusers pipeline's
  // tokenizer/ or root. UsageError naming the path when there is none, or
  // it is not a unigram model with an EOS piece ("</s>").
  explicit T5Tokenizer(const std::string& path);

  // UsageError naming the prompt (its index) when one is not valid UTF-8,
  // SettingError "text_len" when text_len < 1. Thread-safe.
  Tokens encode(const std::vector<std::string>& prompts, int64_t text_len = 512) const;

  // One prompt's ids, cleaned, EOS appended, not truncated.
  std::vector<int> token_ids(const std::string& prompt) const;

  // The file the pieces come from: tokenizer.json or spiece.model.
  const std::string& model_path() const { return model_path_; }
  int eos_id() const { return eos_id_; }
  // The "<pad>" piece, or 0 (umT5's, and Hugging Face's pad id for it) when
  // the model has none.
  int pad_id() const { return pad_id_; }

 private:
  std::string model_path_;
  std::optional<SentencePieceModel> sentencepiece_;
  std::optional<HuggingFaceTokenizer> hugging_face_;
  int eos_id_ = -1, pad_id_ = 0;
};

}  // namespace wt::wan
