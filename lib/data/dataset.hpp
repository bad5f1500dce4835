// Dataset: a directory of shards (*.h5, sorted by name) seen as one indexed
// collection of samples. Opening checks every shard and that all agree;
// reading goes through a SampleReader, which keeps the files open.
//
// Buckets: the shards may hold latents of several shapes (F, H, W; one per
// shard): mixed aspect ratios, clip lengths and stills. The samples of one
// shape form a bucket; buckets are ordered by (F, H, W), so their numbering
// follows from the data, not from file names. Everything else (C, the text's
// L and D, the stored dtypes, the image-to-video condition's Cy, T and D or
// its absence, the VACE context's channels and reference frames or its
// absence) is the same in every shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "wantrain/data/sampler.hpp"
#include "wantrain/data/shard.hpp"

namespace wt::data {

// The samples of one latent shape.
struct Bucket {
  SampleShape shape;
  std::vector<size_t> shards;  // indices into Dataset::shards(), ascending
  int64_t samples = 0;
  std::string name() const { return shape.bucket_name(); }  // "5x32x32"
};

// The file `wandata stage` writes beside a node's local shards: the names
// of all the dataset's shards, one per line ('#' starts a comment), so that
// a job can tell a shard that reached no node from one that never existed.
inline constexpr const char* kStagedShardList = "staged-shards.txt";

class Dataset {
 public:
  // Throws UsageError with one line naming the directory, shard and field:
  // missing or unreadable directory, no shards, any shard that inspect_shard
  // rejects, shards that disagree in anything but the latents' F, H, W.
  static Dataset open(const std::string& directory);
  // The shard files of `directory`, sorted; UsageError when it is missing,
  // not a directory or holds no *.h5.
  static std::vector<std::string> shard_paths(const std::string& directory);
  // open()'s checks (one shape family, some samples: UsageError naming the
  // shards) on shards inspected elsewhere, e.g. by other ranks.
  static Dataset checked(std::string directory, std::vector<ShardInfo> shards);
  // A dataset of shards already inspected (Error where open() would refuse them).
  static Dataset of(std::string directory, std::vector<ShardInfo> shards);

  const std::string& directory() const { return directory_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }
  int64_t size() const { return offsets_.back(); }
  std::vector<int64_t> shard_sizes() const;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The global indices of bucket `b`'s samples, ascending.
  std::vector<int64_t> bucket_indices(size_t b) const;
  // The shape of a dataset of one bucket; for a tool that needs one, a
  // UsageError naming the directory and its buckets otherwise.
  const SampleShape& shape() const;
  // The shape of global sample `index`.
  const SampleShape& shape_of(int64_t index) const { return shards_[locate(index).shard].shape; }
  // The largest bucket's shape (most latent elements): what memory is planned for.
  const SampleShape& largest_shape() const;
  DataLayout layout() const;
  // "5x32x32 (96 samples), 1x32x48 (40 samples)", or the one latents shape.
  std::string describe_buckets() const;

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
  std::vector<Bucket> buckets_;
  std::vector<int> shard_bucket_;  // the bucket of each shard
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
  // (scalar_type(shape.text)), both contiguous. With `condition`, also its
  // defined tensors: y [Cy,F,H,W] (stored as latents), clip_fea [T,D]
  // (as text_emb) and vace_context [Cv,R+F,H,W] (as latents), contiguous;
  // one the shard lacks is an Error. Throws
  // wt::Error naming the shard and sample on any read failure.
  void read(int64_t index, const at::Tensor& latents, const at::Tensor& text_emb, int32_t& text_len,
            const SampleCondition* condition = nullptr);

  // The prompt of sample `index`, or "" when the shard has none.
  std::string prompt(int64_t index);

 private:
  struct Open;
  Open& file(size_t shard);
  const Dataset& dataset_;
  std::vector<std::unique_ptr<Open>> open_;
};

}  // namespace wt::data
