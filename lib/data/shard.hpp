// The shard file format (docs/data-format.md): one HDF5 file of samples.
//
//   /latents   [N, C, F, H, W]  float32 | float16 | bfloat16 (as uint16, attribute dtype = "bfloat16")
//   /text_emb  [N, L, D]        float32 | float16 | bfloat16 (as latents), zero-padded to L
//                               (umT5 outputs overflow float16: bfloat16 keeps their range)
//   /text_len  [N]              int32, real token count (0..L)
//   /prompt    [N]              optional, variable-length UTF-8 strings
//   /y         [N, Cy, F, H, W] optional (version 3): the image-to-video condition, stored as latents;
//                               F, H, W those of /latents
//   /clip_fea  [N, T, D]        optional (version 3, only beside /y): CLIP image features, stored as text_emb
//   /vace_context [N, Cv, R + F, H, W] optional (version 4): a VACE model's context (its R reference
//                               pictures' latent frames, then the latents' F), stored as latents
//   root attributes: format = "wantrain-shard", version = 2 (3 with /y, 4 with /vace_context)
//
// Per-sample datasets are chunked one sample per chunk, so reading a
// sample is one chunk read. Version 2 is version 1's layout; it says that
// the dataset may hold shards of several latent shapes (buckets: F, H, W
// differ, one shape per shard), which a version-1 reader would refuse.
// Version 3 adds /y and /clip_fea (Wan I2V and FLF2V): a shard that has
// them says 3, so that an older reader refuses it rather than training
// text-to-video on it; a shard without them is still written as version 2,
// byte for byte as before. Version 4 adds /vace_context, in the same way.
// All four versions are read.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wt::data {

inline constexpr const char* kShardFormat = "wantrain-shard";
inline constexpr int kShardVersion = 4;               // the newest, what ShardWriter writes with a VACE context
inline constexpr int kConditionedShardVersion = 3;    // what ShardWriter writes with an image condition
inline constexpr int kUnconditionedShardVersion = 2;  // what ShardWriter writes without one
inline constexpr int kOldestShardVersion = 1;         // the oldest still read

// How a tensor is stored in a shard.
enum class Stored { Float32, Float16, BFloat16 };
const char* to_string(Stored stored);
at::ScalarType scalar_type(Stored stored);
Stored parse_stored(const std::string& name);  // "float32" | "float16" | "bfloat16"; UsageError otherwise

// Per-sample shape and storage of a shard. The shards of a dataset share
// all of it but the latents' F, H and W (dataset.hpp: buckets), which /y
// shares with the latents.
struct SampleShape {
  int64_t channels = 16, frames = 1, height = 32, width = 32;  // latents [C, F, H, W]
  int64_t text_len = 64, text_dim = 128;                       // text_emb [L, D]
  Stored latents = Stored::Float32, text = Stored::Float32;
  // The image-to-video condition: y [Cy, F, H, W], stored as `latents` is;
  // 0: the shard has no /y.
  int64_t condition_channels = 0;
  // clip_fea [T, D], stored as `text` is; 0: none.
  int64_t clip_tokens = 0, clip_dim = 0;
  // A VACE model's context [vace_channels, vace_references + F, H, W],
  // stored as `latents` is; 0 channels: the shard has no /vace_context.
  int64_t vace_channels = 0, vace_references = 0;

  bool operator==(const SampleShape& other) const;
  bool operator!=(const SampleShape& other) const { return !(*this == other); }
  bool has_condition() const { return condition_channels > 0; }
  bool has_vace() const { return vace_channels > 0; }
  std::string latents_string() const;    // "[N,16,5,32,32] float16"
  std::string bucket_name() const;       // the latents' F x H x W: "5x32x32"
  std::string text_string() const;       // "[N,512,4096] float16"
  std::string condition_string() const;  // y: "[N,20,5,32,32] float16", or "none"
  std::string clip_string() const;       // clip_fea: "[N,257,1280] bfloat16", or "none"
  std::string vace_string() const;       // vace_context: "[N,96,6,32,32] float16", or "none"
  int64_t latents_bytes() const;         // of one sample, as stored
  int64_t text_bytes() const;
  int64_t condition_bytes() const;  // y, clip_fea and vace_context of one sample, as stored (0 without)
};

// Whether shards of these shapes can be one dataset: all equal but the
// latents' F, H and W (a dataset never mixes shards with /y and without).
bool same_dataset(const SampleShape& a, const SampleShape& b);
// Why shards `a` (of `path_a`) and `b` (of `path_b`) cannot be one
// dataset, one line naming both and what each holds; "" when they can.
std::string dataset_mismatch(const std::string& path_a, const SampleShape& a, const std::string& path_b,
                             const SampleShape& b);

// What one sample is conditioned on besides its text: the image-to-video
// condition (Wan I2V, FLF2V), y [Cy, F, H, W] and clip_fea [T, D], and a
// VACE model's context [Cv, R + F, H, W]; an undefined tensor where the
// shape has none.
struct SampleCondition {
  at::Tensor y;
  at::Tensor clip_fea;
  at::Tensor vace_context{};
};

struct ShardInfo {
  std::string path;
  int64_t samples = 0;
  SampleShape shape;
  bool has_prompt = false;
  int version = kShardVersion;
};

// How the tools lay out a new dataset of `total` samples in `shards` files:
// shard k is DIR/shard-0000k.h5 and holds samples [first(k), first(k+1)),
// near-equal counts in order.
std::string shard_path(const std::string& directory, int64_t k);
int64_t shard_first_sample(int64_t k, int64_t total, int64_t shards);

// Opens one shard and checks its structure: format attributes, datasets,
// ranks, dtypes, matching N, text_len within [0, L]. Throws UsageError with
// one line naming the file and the dataset or attribute at fault.
// With `sample_problems`, a sample's bad field (text_len out of range) is
// appended there, one line each, and the shard is still returned: what
// `wandata verify` uses to go on to every other sample.
ShardInfo inspect_shard(const std::string& path, std::vector<std::string>* sample_problems = nullptr);

// Writes a shard of `samples` samples, one sample at a time. The file is
// complete when close() (or the destructor) has run.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, const SampleShape& shape, int64_t samples, bool with_prompt);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // latents [C, F, H, W], text_emb [L, D], any floating dtype (converted to
  // the stored one); condition.y [Cy, F, H, W], condition.clip_fea [T, D]
  // and condition.vace_context [Cv, R + F, H, W] exactly when the shard's
  // shape has them (Error otherwise), converted as latents and text_emb are.
  void write(int64_t index, const at::Tensor& latents, const at::Tensor& text_emb, int32_t text_len,
             const std::string& prompt = {}, const SampleCondition& condition = {});
  // Shrinks the shard to its first `samples` rows (the rest were never
  // written: items that failed after the shard was sized).
  void keep_first(int64_t samples);
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wt::data
