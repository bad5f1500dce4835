// Dataset: a directory of shards (*.h5, sorted by name) seen as one indexed
// collection of samples. Opening checks every shard and that all agree;
// reading goes through a SampleReader, which keeps the files open.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "wantrain/data/shard.hpp"

namespace wt::data {

class Dataset {
 public:
  // Throws UsageError with one line naming the directory, shard and field:
  // missing or unreadable directory, no shards, any shard that inspect_shard
  // rejects, shards whose sample shapes or dtypes disagree.
  static Dataset open(const std::string& directory);
  // The shard files of `directory`, sorted; UsageError when it is missing,
  // not a directory or holds no *.h5.
  static std::vector<std::string> shard_paths(const std::string& directory);
  // A dataset of shards already inspected (they must share one shape).
  static Dataset of(std::string directory, std::vector<ShardInfo> shards);

  const std::string& directory() const { return directory_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }
  const SampleShape& shape() const { return shards_.front().shape; }
  int64_t size() const { return offsets_.back(); }
  std::vector<int64_t> shard_sizes() const;

  struct Location {
    size_t shard;
    int64_t row;
  };
  // Which shard and row hold global sample `index` (0 <= index < size()).
  Location locate(int64_t index) const;

 private:
  std::string directory_;
  std::vector<ShardInfo> shards_;
  std::vector<int64_t> offsets_;  // offsets_[s] = first global index of shard s; back() = size()
};

// Reads samples of a Dataset. Keeps each shard open once touched. Takes the
// HDF5 library mutex per call; use one SampleReader per thread.
class SampleReader {
 public:
  explicit SampleReader(const Dataset& dataset);
  ~SampleReader();
  SampleReader(const SampleReader&) = delete;
  SampleReader& operator=(const SampleReader&) = delete;

  // Reads global sample `index` into rows of tensors in the stored dtypes:
  // latents [C,F,H,W] (scalar_type(shape.latents)), text_emb [L,D]
  // (scalar_type(shape.text)), both contiguous. Throws wt::Error naming the
  // shard and sample on any read failure.
  void read(int64_t index, const at::Tensor& latents, const at::Tensor& text_emb, int32_t& text_len);

  // The prompt of sample `index`, or "" when the shard has none.
  std::string prompt(int64_t index);

 private:
  struct Open;
  Open& file(size_t shard);
  const Dataset& dataset_;
  std::vector<std::unique_ptr<Open>> open_;
};

}  // namespace wt::data
