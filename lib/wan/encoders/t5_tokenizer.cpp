#include "wantrain/wan/encoders/t5_tokenizer.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "wantrain/util/error.hpp"
#include "wantrain/util/folder_paths.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/encoders/prompt_text.hpp"

namespace wt::wan {
namespace {

// The tokenizer's file: `path` itself, or in the folder (or its tokenizer/:
// a diffusers pipeline's root) tokenizer.json, else spiece.model.
std::string model_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return path;
  for (const auto& folder : {std::filesystem::path(path), std::filesystem::path(path) / "tokenizer"})
    for (const char* name : {"tokenizer.json", "spiece.model"})
      if (std::filesystem::exists(folder / name, error)) {
        const auto named = std::filesystem::path(folder / name).lexically_relative(path).string();
        if (const auto why = outside_folder_reason(path, named); !why.empty())
          throw UsageError(
              fmt::format("tokenizer model {}: {}: a model folder's files lie inside it (docs/model.md, "
                          "\"Files a folder names\")",
                          path, why));
        return (folder / name).string();
      }
  if (const auto index = read_pipeline_index(path); index && index->names("tokenizer"))
    throw UsageError(
        fmt::format("{}: model_index.json names the component tokenizer ({}), but {}/tokenizer/ holds "
                    "no tokenizer.json or spiece.model (an interrupted download, or a copy that left "
                    "it out?)",
                    path, index->components.at("tokenizer"), path));
  throw UsageError(
      fmt::format("tokenizer model {}: a folder without tokenizer.json or spiece.model, here or in its tokenizer/ "
                  "(umT5's tokenizer, as in the google/umt5-xxl folder of a Wan repository, or a diffusers "
                  "pipeline's)",
                  path));
}

bool is_json(const std::string& file) { return std::filesystem::path(file).extension() == ".json"; }

}  // namespace

T5Tokenizer::T5Tokenizer(const std::string& path) : model_path_(model_file(path)) {
  if (is_json(model_path_)) {
    hugging_face_ = HuggingFaceTokenizer::load(model_path_);
    eos_id_ = hugging_face_->id_of("</s>");
    pad_id_ = std::max(0, hugging_face_->id_of("<pad>"));
  } else {
    sentencepiece_ = SentencePieceModel::load(model_path_);
    eos_id_ = sentencepiece_->eos_id();
    pad_id_ = std::max(0, sentencepiece_->pad_id());
  }
  if (eos_id_ < 0)
    throw UsageError(
        fmt::format("tokenizer model {}: has no EOS control piece (\"</s>\"), which umT5's has", model_path_));
}

std::vector<int> T5Tokenizer::token_ids(const std::string& prompt) const {
  const auto text = clean_prompt(prompt);
  auto ids = hugging_face_ ? hugging_face_->encode(text) : sentencepiece_->encode(text);
  ids.push_back(eos_id_);
  return ids;
}

Tokens T5Tokenizer::encode(const std::vector<std::string>& prompts, int64_t text_len) const {
  if (text_len < 1) throw SettingError("text_len", fmt::format("must be at least 1, got {}", text_len));
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    if (const auto bad = invalid_utf8_offset(prompts[p]); bad != std::string::npos)
      throw UsageError(fmt::format("prompt {} is not valid UTF-8 (byte {})", p, bad));
  }
  const auto batch = static_cast<int64_t>(prompts.size());
  Tokens tokens;
  tokens.ids = torch::full({batch, text_len}, pad_id(), torch::kLong);  // [B, text_len]
  tokens.mask = torch::zeros({batch, text_len}, torch::kLong);          // [B, text_len]
  auto ids = tokens.ids.accessor<int64_t, 2>();
  auto mask = tokens.mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto prompt = token_ids(prompts[b]);
    const auto full = static_cast<int64_t>(prompt.size());
    const int64_t kept = std::min(full, text_len);
    for (int64_t t = 0; t < kept - 1; ++t) ids[b][t] = prompt[t];
    ids[b][kept - 1] = eos_id();  // a truncated prompt keeps its EOS last
    for (int64_t t = 0; t < kept; ++t) mask[b][t] = 1;
    tokens.lengths.push_back(kept);
    tokens.full_lengths.push_back(full);
    if (full > text_len) ++tokens.truncated;
  }
  return tokens;
}

}  // namespace wt::wan
