// A Hugging Face tokenizers file (tokenizer.json) of a Unigram model, applied
// as the tokenizers library applies it: what transformers' fast T5 tokenizer
// runs for the official Wan's HuggingfaceTokenizer(google/umt5-xxl) and for
// diffusers' WanPipeline (tokenizers 0.2x, src/tokenizer/added_vocabulary.rs,
// normalizers/, pre_tokenizers/, models/unigram/model.rs):
//
//   added tokens   each one's text ("</s>", "<pad>", "<extra_id_0>") taken out
//                  of the raw text first, leftmost and longest first, its own
//                  id (lstrip and rstrip: the whitespace beside it goes too)
//   normalizer     Precompiled (SentencePiece's character map, per grapheme:
//                  one under 6 bytes replaced whole by its shortest key's
//                  replacement, else character by character), Replace (a
//                  string or a regex), Strip, NFC, NFKC, NFD, NFKD, Sequence
//   pre-tokenizer  WhitespaceSplit, Metaspace (spaces as "▁", one prepended
//                  always, first or never, split before each "▁"), Sequence
//   model          Unigram: Viterbi over every piece of the vocabulary, scores
//                  summed in double; a character no piece covers scores the
//                  lowest score - 10; runs of them one <unk>, or their UTF-8
//                  bytes as <0xNN> pieces when byte_fallback says so
//
// Where it differs from SentencePiece on the same spiece.model
// (sentencepiece_model.hpp): text spelling a special token is that token,
// and transformers' converter writes byte_fallback false for T5 models, so
// characters no piece covers are <unk> where SentencePiece gives bytes.
//
// Anything else (a BPE or WordPiece model, another normalizer or
// pre-tokenizer, a single_word added token) is a UsageError naming the file
// and what it holds. The post-processor (T5's "</s>" after the text) is left
// to the caller.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace wt::wan {

class HuggingFaceTokenizer {
 public:
  // UsageError naming `path` when it cannot be read or holds what is not read (above).
  static HuggingFaceTokenizer load(const std::string& path);

  // The ids of UTF-8 `text`, without the post-processor's tokens. Thread-safe.
  std::vector<int> encode(const std::string& text) const;

  // The id of `token`: an added token's, else the vocabulary's; -1 when neither has it.
  int id_of(const std::string& token) const;
  int size() const;  // the vocabulary's pieces

 private:
  struct Impl;
  explicit HuggingFaceTokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace wt::wan
