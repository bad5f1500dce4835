#include "wantrain/wan/encode/dataset_encoder.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <variant>

#include "wantrain/data/sampler.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/seconds.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/progress.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/test_hooks.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/encoders/prompt_text.hpp"
#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/sample/image_condition.hpp"
#include "wantrain/wan/sample/vace_condition.hpp"
#include "wantrain/wan/sample/fun_control_condition.hpp"
#include "wantrain/wan/encode/item_probes.hpp"
#include "wantrain/wan/vae/video_frames.hpp"

namespace wt::wan {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

std::string record_path(const std::string& out, int64_t shard) {
  return fs::path(data::shard_path(out, shard)).replace_extension(".json").string();
}

// Whether shard k is done: its record written, and its file there when the
// record counts samples. A record whose shard was deleted (or not copied)
// is not done: the shard is encoded again, not counted as if present.
bool shard_done(const std::string& out, int64_t k) {
  const std::string record = record_path(out, k);
  if (!fs::exists(record)) return false;
  if (fs::exists(data::shard_path(out, k))) return true;
  const auto doc = parse_json_or_discarded(read_whole_file(record));
  return doc.is_object() && doc.contains("samples") && doc["samples"] == 0;
}

// An item made ready by the decoding thread: its clips as [3, N, H, W] in
// [-1, 1], or why it is skipped.
struct Prepared {
  size_t item = 0;
  std::vector<at::Tensor> clips;
  // VACE and Fun-Control: each clip's control [3, N, H, W] in [-1, 1];
  // VACE: its mask [1, N, H, W] in [0, 1] (undefined: none given), and the
  // item's reference pictures [3, H, W] fitted to the bucket's size.
  std::vector<at::Tensor> controls, masks, references;
  std::string problem;
};
// The start of a shard, before its items.
struct ShardStart {
  int64_t shard = 0;
};
struct Finished {};
using Work = std::variant<ShardStart, Prepared, Finished>;

// A bounded queue between the decoding thread and the encoders.
class Handoff {
 public:
  void put(Work work) {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return queue_.size() < 2 || stop_; });
    if (stop_) return;
    queue_.push_back(std::move(work));
    ready_.notify_one();
  }
  Work take() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty() || failure_; });
    if (queue_.empty()) std::rethrow_exception(failure_);
    Work w = std::move(queue_.front());
    queue_.pop_front();
    room_.notify_one();
    return w;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = e;
    ready_.notify_all();
  }
  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    room_.notify_all();
  }
  bool stopped() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stop_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<Work> queue_;
  std::exception_ptr failure_;
  bool stop_ = false;
};

// The clips of one item in one bucket: which frames (the plan's count at
// the frame rate; the file probed again when resampling needs its
// timestamps), then those frames decoded at the bucket's size, as float
// tensors. A problem line when the item cannot be used.
std::string decode_clips(const data::MediaItem& item, const ItemProbe& planned, const PlannedItem& entry,
                         const ClipBucket& bucket, const DatasetEncoderSettings& s, Prepared& prepared) {
  auto& out = prepared.clips;
  if (auto problem = caption_problem(item); !problem.empty()) return problem;
  std::vector<int64_t> at_rate(size_t(planned.frames));  // the source frame of each frame at the rate
  for (size_t i = 0; i < at_rate.size(); ++i) at_rate[i] = int64_t(i);
  if (s.selection.fps > 0) {
    at_rate = media::resample_frames(media::probe_media(item.media, s.limits).times, s.selection.fps);
    if (int64_t(at_rate.size()) != planned.frames)
      return fmt::format("changed since the job began: {} frames at {:g} fps now, {} then", at_rate.size(),
                         s.selection.fps, planned.frames);
  }
  media::FrameSelection selection = s.selection;
  selection.frames = bucket.frames;
  const auto starts = media::clip_starts(planned.frames, selection);
  if (int64_t(starts.size()) != entry.clips) throw Error("encode: the plan's clip count does not hold");
  std::vector<int64_t> wanted;
  for (const int64_t start : starts)
    for (int64_t j = 0; j < bucket.frames; ++j) wanted.push_back(at_rate[size_t(start + j)]);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  media::DecodeOptions options;
  options.size = bucket.size;
  options.limits = s.limits;
  options.threads = s.decode_threads;
  std::vector<media::Image> frames(wanted.size());
  media::decode_frames(item.media, wanted, options,
                       [&](size_t k, media::Image&& image) { frames[k] = std::move(image); });
  const auto clip_of = [&](const std::vector<media::Image>& decoded, int64_t start) {
    std::vector<media::Image> picked;
    for (int64_t j = 0; j < bucket.frames; ++j) {
      const int64_t index = at_rate[size_t(start + j)];
      picked.push_back(decoded[size_t(std::lower_bound(wanted.begin(), wanted.end(), index) - wanted.begin())]);
    }
    return frames_to_video(picked);
  };
  for (const int64_t start : starts) out.push_back(clip_of(frames, start));
  if (!s.vace && !s.fun_control) return {};
  if (s.fun_control && item.control.empty())
    return "no control video (NAME.control.mp4 beside it, or the listing's control_video)";
  if (s.fun_control && (!item.mask.empty() || !item.references.empty()))
    return fmt::format("{}: a VACE control's {} (a Fun-Control model reads the control video alone)",
                       !item.mask.empty() ? item.mask : item.references.front(),
                       !item.mask.empty() ? "mask" : "reference picture");
  // VACE: frame k of the control (and of its mask) goes with frame k of the clip.
  if (!item.mask.empty() && item.control.empty())
    return fmt::format("{}: a mask without a control video to keep or remake", item.mask);
  if (s.vace && int64_t(item.references.size()) != s.vace_references)
    return fmt::format("{} reference picture{}, and the dataset's samples have {} (the first usable item's)",
                       item.references.size(), item.references.size() == 1 ? "" : "s", s.vace_references);
  for (const auto& path : item.references)
    prepared.references.push_back(fit_reference(read_picture(path), bucket.size.height, bucket.size.width));
  for (const auto& [path, into] : {std::pair{&item.control, &prepared.controls}, {&item.mask, &prepared.masks}}) {
    if (path->empty()) {
      into->assign(out.size(), at::Tensor());
      continue;
    }
    const int64_t length = media::probe_media(*path, s.limits).frames();
    if (length <= wanted.back())
      return fmt::format("{}: {} frame{}, shorter than the clip's {} (its frame k goes with the clip's frame k)", *path,
                         length, length == 1 ? "" : "s", wanted.back() + 1);
    std::vector<media::Image> decoded(wanted.size());
    media::decode_frames(*path, wanted, options,
                         [&](size_t k, media::Image&& image) { decoded[k] = std::move(image); });
    for (const int64_t start : starts) {
      const auto video = clip_of(decoded, start);
      into->push_back(into == &prepared.masks ? mask_of_video(video) : video);
    }
  }
  return {};
}

void decode_ahead(const std::vector<data::MediaItem>& items, const std::vector<ItemProbe>& probes,
                  const EncodePlan& plan, const std::vector<int64_t>& shards, const DatasetEncoderSettings& s,
                  Handoff& handoff) {
  try {
    for (const int64_t k : shards) {
      const auto& shard = plan.shards[size_t(k)];
      handoff.put(ShardStart{k});
      for (const auto& entry : shard.items) {
        if (handoff.stopped()) return;
        Prepared p;
        p.item = entry.item;
        try {
          p.problem = decode_clips(items[entry.item], probes[entry.item], entry, shard.bucket, s, p);
        } catch (const UsageError& e) {
          p.problem = without_path(e.what(), items[entry.item].media);
        }
        if (!p.problem.empty()) p = Prepared{p.item, {}, {}, {}, {}, p.problem};
        handoff.put(std::move(p));
      }
    }
    handoff.put(Finished{});
  } catch (...) {
    handoff.fail(std::current_exception());
  }
}

// How the settings record shows a value: text as it is, the rest as JSON.
std::string shown(const nlohmann::json& value) {
  if (!value.is_string()) return json_excerpt(value, 200);
  const auto text = value.get<std::string>();
  return text.size() > 200 ? text.substr(0, 200) + "..." : text;
}

std::string sizes_text(const std::vector<media::FrameSize>& sizes) {
  std::string out;
  for (const auto& size : sizes) out += fmt::format("{}{}x{}", out.empty() ? "" : ",", size.width, size.height);
  return out;
}

// What makes two runs the same job. `layout` names how items map to shards
// (by bucket since version 2), so that a folder begun by an older encoder is
// refused rather than finished on another layout.
nlohmann::json settings_json(const DatasetEncoderSettings& s) {
  const auto& b = s.buckets;
  return {{"layout", 2},
          {"listing", fs::absolute(s.listing).lexically_normal().string()},
          {"caption_extension", s.listing_options.caption_extension},
          {"frames", frames_text(b.frames)},
          {"frame_buckets", b.choice == media::FrameBucketChoice::All ? "all" : "longest"},
          {"fps", s.selection.fps},
          {"frame_extraction", media::frame_extraction_name(s.selection.extraction)},
          {"frame_stride", s.selection.stride},
          {"frame_sample", s.selection.samples},
          {"sizes", sizes_text(b.sizes)},
          {"bucketed", b.bucketed},
          {"no_upscale", b.no_upscale},
          {"bucket_step", b.step},
          {"items_per_shard", s.items_per_shard},
          {"latent_dtype", data::to_string(s.latent_dtype)},
          {"emb_dtype", data::to_string(s.emb_dtype)},
          {"models", s.models_fingerprint}};
}

// The settings record of `s`, with the image condition only where there is
// one: a text-to-video job begun by an earlier wandata goes on as before.
nlohmann::json job_settings(const DatasetEncoderSettings& s) {
  auto settings = settings_json(s);
  if (s.condition_images > 0) settings["condition"] = s.condition_images == 1 ? "i2v" : "flf2v";
  if (s.vace) {
    settings["condition"] = "vace";
    settings["vace_references"] = s.vace_references;
  }
  if (s.fun_control)
    settings["condition"] = s.fun_control_mask        ? "fun-control-mask"
                            : s.fun_control_reference ? "fun-control-ref"
                                                      : "fun-control";
  return settings;
}

// Rank 0 readies the folder: new, or a run of the same settings to go on with.
void prepare_output(const DatasetEncoderSettings& s) {
  const std::string record = (fs::path(s.out) / "encode.json").string();
  const auto mine = job_settings(s);
  std::error_code ec;
  if (fs::exists(record, ec)) {
    nlohmann::json before;
    try {
      before = parse_json(read_whole_file(record));
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{}: not the record of a wandata encode run (unreadable JSON)", record));
    }
    if (!before.is_object() || !before.contains("layout"))
      throw UsageError(
          fmt::format("{}: begun by an older wandata encode, whose shards are laid out otherwise: finish "
                      "it with that version, or use another --out",
                      s.out));
    for (const auto& [key, value] : mine.items())
      if (!before.contains(key) || before[key] != value)
        throw UsageError(fmt::format("{}: encoded with {} = {} before, {} now: another job; use another --out", s.out,
                                     key, before.contains(key) ? shown(before[key]) : "(none)", shown(value)));
    return;
  }
  if (fs::exists(s.out, ec) && !fs::is_empty(s.out, ec))
    throw UsageError(fmt::format("{}: holds files but no encode.json: not a wandata encode run to go on with", s.out));
  fs::create_directories(s.out, ec);
  if (ec) throw UsageError(fmt::format("{}: cannot be created: {}", s.out, ec.message()));
  write_file_durably(record, mine.dump(2) + "\n");
}

// The plan of this job: the first run's probes when it is resumed, else
// the items probed now (shared over the ranks). With `strict`, a skipped
// item fails the job before anything is recorded, so that a rerun probes
// the item again once it is mended.
EncodePlan plan_job(const DatasetEncoderSettings& s, const std::vector<data::MediaItem>& items,
                    std::vector<ItemProbe>& probes, distributed::World& world) {
  auto recorded = recorded_probes(items, s.out, world);
  probes = recorded ? std::move(*recorded) : probe_items(items, s.limits, s.selection.fps, world);
  EncodePlan plan = plan_encode(probes, s.buckets, s.selection, s.items_per_shard);
  world.agree([&] {
    if (s.strict && !plan.skipped.empty())
      throw UsageError(
          fmt::format("{}: {} (--strict)", items[plan.skipped.front().first].origin, plan.skipped.front().second));
  });
  if (world.is_root())
    for (const auto& [item, why] : plan.skipped) report_warning("skipped {}: {}", items[item].origin, why);
  // Before any shard record: a record must never outlive the probes its
  // plan was made from (a rerun would plan anew and keep it).
  world.agree([&] {
    if (world.is_root() && !recorded) record_probes(items, probes, s.out);
  });
  return plan;
}

// The settings' checks that need the encoders.
void check_settings(const DatasetEncoderSettings& s, VideoVae& vae, const ClipVision* clip) {
  check_buckets(s.buckets, 2 * vae.spatial_factor());  // Wan2.2's VAE: sides multiples of 32
  if (s.items_per_shard < 1) throw SettingError("items_per_shard", "must be at least 1");
  if (s.condition_images < 0 || s.condition_images > 2)
    throw SettingError("condition", "must be none, i2v (the first frame) or flf2v (the first and the last)");
  if (s.condition_images == 2)
    for (const int64_t frames : s.buckets.frames)
      if (frames < 5)
        throw SettingError("condition", fmt::format("flf2v needs a first and a last frame: clips of 5 frames or "
                                                    "more, and the frame buckets include {}",
                                                    frames));
  if (clip && s.condition_images == 0 && !s.fun_control)
    throw SettingError("condition", "a CLIP tower encodes the picture of an image condition, and none is asked for");
  if (s.fun_control_reference && (!s.fun_control || s.fun_control_mask))
    throw SettingError("condition", "a reference frame is a Fun-Control V1.1 model's (fun-control-ref)");
  if (int(s.vace) + int(s.fun_control) + int(s.condition_images > 0) > 1)
    throw SettingError("condition",
                       "a sample is conditioned on a picture, a VACE control or a Fun-Control control, "
                       "one of them");
}

// What the shards of a bucket hold per sample:
// [C, 1 + (F - 1) / 4, H / 8, W / 8] latents for Wan2.1's VAE (Wan2.2's: 48
// channels, H / 16, W / 16), the text, and an image condition's y and CLIP features.
data::SampleShape sample_shape(const ClipBucket& b, const DatasetEncoderSettings& s, VideoVae& vae, TextEncoder& text,
                               ClipVision* clip) {
  const int64_t factor = vae.spatial_factor();
  data::SampleShape shape{vae.z_dim(),
                          vae.latent_frames(b.frames),
                          b.size.height / factor,
                          b.size.width / factor,
                          text.text_len(),
                          text.dim(),
                          s.latent_dtype,
                          s.emb_dtype};
  if (s.condition_images > 0) shape.condition_channels = 4 + vae.z_dim();  // y: mask and latents
  // y: the control's and the start frame's latents (Wan2.2-Fun's: and the mask)
  if (s.fun_control)
    shape.condition_channels = (s.fun_control_reference ? 3 : 2) * vae.z_dim() + (s.fun_control_mask ? 4 : 0);
  if ((s.condition_images > 0 || s.fun_control) && clip) {
    shape.clip_tokens = (s.fun_control_reference ? 2 : std::max(s.condition_images, 1)) * (*clip)->config().tokens();
    shape.clip_dim = (*clip)->config().dim;
  }
  if (s.vace) {
    shape.vace_channels = vace_context_channels(vae);
    shape.vace_references = s.vace_references;
  }
  return shape;
}

// This rank's shards still to encode (every size-th, without a record yet;
// a killed run's unfinished file removed), and their items.
std::vector<int64_t> shards_to_encode(const DatasetEncoderSettings& s, const EncodePlan& plan,
                                      const distributed::World& world, int64_t& items) {
  std::vector<int64_t> mine;
  items = 0;
  for (int64_t k = world.rank(); k < int64_t(plan.shards.size()); k += world.size()) {
    if (shard_done(s.out, k)) continue;
    if (fs::exists(record_path(s.out, k)))
      report_warning("{}: missing, though its record {} is there: encoding it again", data::shard_path(s.out, k),
                     record_path(s.out, k));
    std::error_code ec;
    fs::remove(data::shard_path(s.out, k) + ".partial", ec);  // a killed run's unfinished shard
    mine.push_back(k);
    items += int64_t(plan.shards[size_t(k)].items.size());
  }
  return mine;
}

// The shard being written: its rows, its items done, the prompts cut to
// text_len and the items skipped, then its record.
struct ShardInProgress {
  int64_t shard = -1, row = 0, items_done = 0, truncated = 0;
  std::unique_ptr<data::ShardWriter> writer;
  std::vector<std::pair<size_t, std::string>> problems;  // (item, line)

  void start(int64_t k, const data::SampleShape& shape, int64_t clips, const std::string& out) {
    shard = k;
    row = 0, items_done = 0, truncated = 0;
    problems.clear();
    writer = std::make_unique<data::ShardWriter>(data::shard_path(out, shard) + ".partial", shape, clips,
                                                 /*with_prompt=*/true);
  }
  // Renames the shard into place (none when it has no rows) and writes its record.
  void finish(const PlannedShard& planned, const std::string& out) {
    const std::string path = data::shard_path(out, shard);
    writer->keep_first(row);
    writer->close();
    writer.reset();
    if (row > 0) {
      std::error_code ec;
      fs::rename(path + ".partial", path, ec);
      if (ec) throw Error(fmt::format("{}: cannot be renamed into place: {}", path, ec.message()));
    } else {
      fs::remove(path + ".partial");
    }
    nlohmann::json skipped = nlohmann::json::array(), skipped_items = nlohmann::json::array();
    for (const auto& [item, line] : problems) skipped.push_back(line), skipped_items.push_back(item);
    const nlohmann::json record{{"shard", shard},
                                {"bucket",
                                 {{"frames", planned.bucket.frames},
                                  {"width", planned.bucket.size.width},
                                  {"height", planned.bucket.size.height}}},
                                {"items", planned.items.size()},
                                {"samples", row},
                                {"truncated_prompts", truncated},
                                {"skipped", skipped},
                                {"skipped_items", skipped_items}};
    write_file_durably(record_path(out, shard), record.dump(2) + "\n");
  }
};

// A V1.1 sample's reference frame (fun_control_reference): one of the clip's
// frames after the first, uniform, keyed by the item's place in the listing
// and the clip's in the item; 0 for a still (it has no other).
int64_t reference_frame(size_t item, int64_t clip, int64_t frames) {
  constexpr uint64_t kReferenceFrameSeed = 0x7265666572656e63;  // "referenc"
  if (frames < 2) return 0;
  data::PortableRandom r(sample_key(kReferenceFrameSeed, clip, int64_t(item)));
  return 1 + int64_t((r.next() >> 11) % uint64_t(frames - 1));
}

// An item's clips encoded into the shard's next rows: the caption by the
// text encoder, each clip by the VAE (and with an image condition its y
// and CLIP features). Returns the samples written.
int64_t encode_item(const data::MediaItem& item, const Prepared& prepared, const DatasetEncoderSettings& s,
                    VideoVae& vae, TextEncoder& text, ClipVision* clip, ShardInProgress& shard,
                    DatasetEncoderSummary& summary) {
  const auto device = vae.parameters().front().device();
  const auto text_start = Clock::now();
  auto encoded = text.encode({*item.caption});
  summary.text_seconds += seconds_since(text_start);
  shard.truncated += encoded.truncated;
  int64_t samples = 0;
  for (const auto& frames : prepared.clips) {  // [3, F, H, W] in [-1, 1]
    torch::NoGradGuard no_grad;
    const auto vae_start = Clock::now();
    const auto latents = vae.encode(frames.unsqueeze(0).to(device)).to(torch::kCPU);  // [1, z, t, h, w]
    data::SampleCondition condition;
    if (s.condition_images > 0) {
      const int64_t f = frames.size(1);
      const auto first = frames.select(1, 0);
      const auto last = s.condition_images == 2 ? frames.select(1, f - 1) : at::Tensor();
      condition.y = image_condition_y(vae, first, last, f).to(torch::kCPU);
      if (clip) condition.clip_fea = image_clip_features(**clip, first, last).to(torch::kCPU);
    }
    if (s.vace) {  // no control video: grey, no mask: every pixel made (as released)
      const size_t c = size_t(samples);
      const VaceSource source{prepared.controls[c], prepared.masks[c], prepared.references};
      condition.vace_context =
          vace_context(vae, source, frames.size(1), frames.size(2), frames.size(3)).to(torch::kCPU);
    }
    if (s.fun_control) {  // the clip's first frame is its start picture
      const auto first = frames.select(1, 0);
      // A still's start would be its whole target: Wan2.2-Fun's y keeps a
      // one-frame start (the pipeline samples so), so a still gets none
      // (Wan2.1-Fun's y has none there anyway).
      const auto start = s.fun_control_mask && frames.size(1) == 1 ? at::Tensor() : first;
      condition.y = fun_control_y(vae, {prepared.controls[size_t(samples)], start, {}}, frames.size(1), frames.size(2),
                                  frames.size(3), s.fun_control_mask)
                        .to(torch::kCPU);
      if (clip) condition.clip_fea = image_clip_features(**clip, first, {}).to(torch::kCPU);
      if (s.fun_control_reference) {  // another frame, alone through the VAE, in latent frame 0
        const auto other = frames.select(1, reference_frame(prepared.item, samples, frames.size(1)));
        auto reference = torch::zeros_like(condition.y.narrow(0, 0, vae.z_dim()));  // [z, F', H', W']
        reference.select(1, 0).copy_(picture_latents(vae, other, frames.size(2), frames.size(3)).to(torch::kCPU));
        condition.y = torch::cat({condition.y, reference});
        if (clip)
          condition.clip_fea = torch::cat({condition.clip_fea, image_clip_features(**clip, other, {}).to(torch::kCPU)});
      }
    }
    summary.vae_seconds += seconds_since(vae_start);
    shard.writer->write(shard.row++, latents[0], encoded.embedding[0], encoded.lengths[0], *item.caption, condition);
    ++samples;
  }
  return samples;
}

// The job's summary from every shard's record (those of earlier runs too),
// once all ranks are done: buckets, samples, cut prompts, and each skipped
// item's line once, in listing order.
void summarize(const DatasetEncoderSettings& s, const std::vector<data::MediaItem>& items, const EncodePlan& plan,
               const std::function<data::SampleShape(const ClipBucket&)>& shape_of, DatasetEncoderSummary& summary) {
  auto skipped = plan.skipped;
  for (size_t i = 0; i < skipped.size(); ++i)
    skipped[i].second = items[skipped[i].first].origin + ": " + skipped[i].second;
  for (int64_t k = 0; k < int64_t(plan.shards.size()); ++k) {
    const auto record = parse_json(read_whole_file(record_path(s.out, k)));
    const auto& bucket = plan.shards[size_t(k)].bucket;
    if (summary.buckets.empty() || !(summary.buckets.back().bucket == bucket))
      summary.buckets.push_back({bucket, shape_of(bucket)});
    const auto samples = record.at("samples").get<int64_t>();
    summary.buckets.back().samples += samples;
    summary.buckets.back().shards += 1;
    summary.samples += samples;
    summary.truncated_prompts += record.at("truncated_prompts").get<int64_t>();
    const auto& lines = record.at("skipped");
    const auto& at = record.at("skipped_items");
    for (size_t j = 0; j < lines.size(); ++j) skipped.emplace_back(at.at(j).get<size_t>(), lines[j].get<std::string>());
  }
  // Each line once (an item of several clip lengths may fail alike in each of their shards).
  std::stable_sort(skipped.begin(), skipped.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  skipped.erase(std::unique(skipped.begin(), skipped.end()), skipped.end());
  for (auto& entry : skipped) summary.skipped.push_back(std::move(entry.second));
}

}  // namespace

DatasetEncoderSummary encode_dataset(const DatasetEncoderSettings& given, VideoVae& vae, TextEncoder& text,
                                     distributed::World& world, ClipVision* clip) {
  const auto started = Clock::now();
  DatasetEncoderSettings s = given;
  check_settings(s, vae, clip);
  std::vector<data::MediaItem> items;
  world.agree([&] {
    items = data::list_media(s.listing, s.listing_options);
    if (s.vace)  // every sample's context has the first usable item's reference frames
      for (const auto& item : items)
        if (item.problem.empty()) {
          s.vace_references = int64_t(item.references.size());
          break;
        }
    if (world.is_root()) prepare_output(s);
  });
  std::vector<ItemProbe> probes;
  const EncodePlan plan = plan_job(s, items, probes, world);
  const auto shards = int64_t(plan.shards.size());
  int64_t kept = 0;
  for (int64_t k = 0; k < shards; ++k) kept += shard_done(s.out, k) ? 1 : 0;
  int64_t my_items = 0;
  const std::vector<int64_t> mine = shards_to_encode(s, plan, world, my_items);
  const auto shape_of = [&](const ClipBucket& b) { return sample_shape(b, s, vae, text, clip); };

  Handoff handoff;
  std::thread decoder(decode_ahead, std::cref(items), std::cref(probes), std::cref(plan), std::cref(mine), std::cref(s),
                      std::ref(handoff));
  struct JoinOnExit {
    std::thread& t;
    Handoff& h;
    ~JoinOnExit() {
      h.stop();
      if (t.joinable()) t.join();
    }
  } join_on_exit{decoder, handoff};

  DatasetEncoderSummary summary;
  Progress progress("encode", my_items);
  auto last_line = Clock::now();
  int64_t done_items = 0, done_samples = 0;
  ShardInProgress shard;
  auto skip = [&](size_t item, const std::string& line) {
    if (s.strict) throw UsageError(line + " (--strict)");
    shard.problems.emplace_back(item, line);
    progress.interrupt();
    report_warning("skipped {}", line);
  };
  for (bool running = true; running;) {
    const auto waiting = Clock::now();
    Work work = handoff.take();
    summary.waiting_seconds += seconds_since(waiting);
    if (auto* start = std::get_if<ShardStart>(&work)) {
      const auto& planned = plan.shards[size_t(start->shard)];
      shard.start(start->shard, shape_of(planned.bucket), planned.clips(), s.out);
    } else if (auto* p = std::get_if<Prepared>(&work)) {
      const auto& item = items[p->item];
      test_delay("encode_item");
      // A still (a 1-frame sample of a bucketed encode) has no last frame.
      const bool too_short = s.condition_images == 2 &&
                             std::any_of(p->clips.begin(), p->clips.end(), [](const auto& c) { return c.size(1) < 5; });
      if (!p->problem.empty())
        skip(p->item, item.origin + ": " + p->problem);
      else if (too_short)
        skip(p->item,
             item.origin + ": a still or a clip under 5 frames has no last frame to give (the flf2v condition)");
      else
        done_samples += encode_item(item, *p, s, vae, text, clip, shard, summary);
      ++done_items;
      progress.advance();
      const auto& planned = plan.shards[size_t(shard.shard)];
      if (++shard.items_done == int64_t(planned.items.size())) shard.finish(planned, s.out);
      if (!progress.enabled() && Clock::now() - last_line > std::chrono::seconds(30)) {
        last_line = Clock::now();
        const double seconds = std::chrono::duration<double>(last_line - started).count();
        report_info("encode: {}/{} items, {} samples, {:.2f} samples/s", done_items, my_items, done_samples,
                    done_samples / std::max(seconds, 1e-9));
      }
    } else {
      running = false;
    }
  }
  progress.interrupt();

  // Ranks finish their shards at different times (hours apart on a skewed
  // listing): the summary waits for all of them past the comm timeout. A
  // rank that fails ends the whole job instead (run_app's abort).
  const auto timeout = world.timeout();
  world.set_timeout(std::chrono::hours(24 * 7));
  world.barrier();
  world.set_timeout(timeout);
  summary.items = int64_t(items.size());
  summary.shards = shards;
  summary.shards_kept = kept;
  summarize(s, items, plan, shape_of, summary);
  summary.seconds = seconds_since(started);
  return summary;
}

}  // namespace wt::wan
