// A SentencePiece unigram model (the `.model` file spm_train writes; umT5's
// spiece.model) read and applied in C++, giving the ids that SentencePiece
// 0.1.97's SentencePieceProcessor::Encode gives (src/normalizer.cc,
// src/unigram_model.cc EncodeOptimized, src/sentencepiece_processor.cc):
//
//   normalisation  user-defined pieces kept as written; otherwise the longest
//                  match in the model's precompiled character map (nmt_nfkc
//                  for umT5: NFKC and SentencePiece's own rules); leading,
//                  trailing and repeated spaces dropped, a "▁" in front and
//                  for each space (as the model's normalizer settings say)
//   segmentation   Viterbi over the pieces (float scores, summed as
//                  SentencePiece sums them, ties to the earlier start); a
//                  character no piece covers is <unk>, runs of them one <unk>,
//                  or its UTF-8 bytes as <0xNN> pieces when the model has
//                  byte fallback; user-defined pieces always win
//
// Why not libsentencepiece: Debian's libsentencepiece.so.0 carries its own
// copy of protobuf 3.14 with exported symbols, and LibTorch (and the
// TensorBoard writer) load Debian's libprotobuf 3.21: a process with both
// dies at start-up (protobuf's version check aborts, or a crash), whichever
// comes first in the link. The file format is protobuf, read here directly.
// tests/unit/wan/encoders/t5_tokenizer_test.cpp checks the ids against python3-sentencepiece
// (the library itself) on models spm_train writes.
//
// Only unigram models are read (umT5's kind); a BPE, word or char model is a
// UsageError naming the file.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace wt::wan {

class SentencePieceModel {
 public:
  // UsageError naming `path` when it cannot be read or is not a unigram
  // SentencePiece model.
  static SentencePieceModel load(const std::string& path);
  // The same from the file's bytes; `source` names them in errors.
  static SentencePieceModel parse(const std::string& bytes, const std::string& source);

  // The ids of UTF-8 `text` (malformed bytes read as U+FFFD, as
  // SentencePiece does), without BOS or EOS. Thread-safe.
  std::vector<int> encode(const std::string& text) const;

  int size() const;  // pieces, every kind
  const std::string& piece(int id) const;
  int unk_id() const;
  // The control pieces named by the model's trainer settings ("</s>",
  // "<pad>" unless renamed), or -1 when the model has none.
  int eos_id() const;
  int pad_id() const;

 private:
  struct Impl;
  explicit SentencePieceModel(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace wt::wan
