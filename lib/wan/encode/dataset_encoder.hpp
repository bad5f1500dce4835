// `wandata encode` as a library call: media and captions in, a shard
// dataset of normalised VAE latents and umT5 embeddings out
// (docs/data-format.md).
//
// Every item is probed first (wan/encode/item_probes.hpp: the ranks share it),
// which gives its buckets: the picture size and the clip lengths it is made
// at (wan/encode/encode_plan.hpp). The items are grouped by bucket, buckets in
// (frames, height, width) order and each bucket's items in listing order,
// and cut into shards of `items_per_shard`: every shard holds one shape.
// Shard k is encoded by rank k mod N, so the dataset is the same, sample for
// sample, for any number of ranks. Each shard is written to a .partial file
// and renamed when complete, then its record (OUT/shard-0000k.json: bucket,
// items, samples, skipped items and why) is written: a run killed and
// started again with the same settings keeps every shard that has a record
// and does the rest, on the first run's plan (OUT/items.json).
//
// Decoding runs ahead of the encoders on a thread of its own, one item in
// hand, so the VAE and umT5 never wait for FFmpeg.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/data/media_items.hpp"
#include "wantrain/data/shard.hpp"
#include "wantrain/media/frame_selection.hpp"
#include "wantrain/media/media_reader.hpp"
#include "wantrain/wan/encode/encode_plan.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/encoders/text_encoder.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::distributed {
class World;
}

namespace wt::wan {

struct DatasetEncoderSettings {
  std::string listing;  // folder, .csv or .jsonl (data/media_items.hpp)
  std::string out;      // the dataset folder
  data::MediaListOptions listing_options;
  media::FrameSelection selection;  // frame rate and extraction (`frames`: each bucket's length)
  EncodeBuckets buckets;            // picture sizes and clip lengths
  media::MediaLimits limits;
  int64_t items_per_shard = 16;
  data::Stored latent_dtype = data::Stored::Float32, emb_dtype = data::Stored::BFloat16;
  // The image-to-video condition stored with each sample
  // (wan/sample/image_condition.hpp): 0 none (text-to-video data), 1 the first
  // frame (i2v), 2 the first and the last (flf2v). /y always; /clip_fea
  // when a CLIP tower is given (Wan2.1's I2V and FLF2V read it, Wan2.2's
  // I2V does not).
  int condition_images = 0;
  // A VACE model's context (wan/sample/vace_condition.hpp) stored with each
  // sample: each item's control video, mask video and reference pictures
  // (data/media_items.hpp), each optional; every item has the first listed
  // item's number of reference pictures (vace_references, set from the
  // listing), or is skipped with a line.
  bool vace = false;
  int64_t vace_references = 0;
  // A Fun-Control model's condition (wan/sample/fun_control_condition.hpp)
  // stored with each sample as /y: the item's control video's latents and
  // the clip's first frame's (its start picture, as VideoX-Fun trains), and
  // with a CLIP tower the first frame's CLIP features /clip_fea. An item
  // without a control video is skipped with a line. With fun_control_mask,
  // Wan2.2-Fun's layout: the control's latents, then the first frame's i2v
  // condition (mask and latents); no CLIP features.
  bool fun_control = false;
  bool fun_control_mask = false;
  // With fun_control (not _mask), a V1.1 model's data (wan/model/reference_frame.hpp):
  // /y also holds another frame of each clip as a reference, drawn
  // uniformly from its frames after the first (keyed by the item and the
  // clip, so every run and rank count draws the same), and /clip_fea that
  // frame's CLIP features after the start's.
  bool fun_control_reference = false;
  bool strict = false;     // a bad item fails the job instead of being skipped
  int decode_threads = 1;  // FFmpeg decoder threads
  // What else makes two runs the same job (the model files), for resuming.
  std::string models_fingerprint;
};

// One bucket of the dataset, as encoded.
struct BucketSummary {
  ClipBucket bucket;
  data::SampleShape shape;  // the latents' [C, F, H, W]
  int64_t samples = 0, shards = 0;
};

struct DatasetEncoderSummary {
  int64_t items = 0, samples = 0, shards = 0, shards_kept = 0, truncated_prompts = 0;
  std::vector<BucketSummary> buckets;  // in shard order
  std::vector<std::string> skipped;    // "ORIGIN: reason", in listing order
  double seconds = 0;
  // This rank's time in the VAE, in umT5, and waiting for the decoding
  // thread: with decoding overlapped, the first two are nearly all of it.
  double vae_seconds = 0, text_seconds = 0, waiting_seconds = 0;
};

// Collective over `world`. UsageError for an unusable listing or output
// folder, a folder encoded with other settings, and (strict) a bad item.
// `clip`: the CLIP tower for /clip_fea (condition_images > 0 only), or null.
DatasetEncoderSummary encode_dataset(const DatasetEncoderSettings& settings, VideoVae& vae, TextEncoder& text,
                                     distributed::World& world, ClipVision* clip = nullptr);

}  // namespace wt::wan
