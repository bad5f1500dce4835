#include "wantrain/wan/dataset_encoder.hpp"

#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <variant>

#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/progress.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/test_hooks.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/wan/encoders/prompt_text.hpp"
#include "wantrain/wan/video_frames.hpp"

namespace wt::wan {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string record_path(const std::string& out, int64_t shard) {
  return fs::path(data::shard_path(out, shard)).replace_extension(".json").string();
}

// An item made ready by the decoding thread: its clips as [3, N, H, W] in
// [-1, 1], or why it is skipped.
struct Prepared {
  size_t item = 0;
  std::vector<at::Tensor> clips;
  std::string problem;
};
// The start of a shard: how many clips its items hold by their headers.
struct ShardStart {
  int64_t shard = 0, clips = 0;
  std::vector<std::string> problems;  // found while counting: "ORIGIN: reason"
  std::vector<size_t> usable;         // items still to decode
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

// A media error without the path the item's origin already names.
std::string without_path(const std::string& message, const std::string& path) {
  const std::string prefix = path + ": ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

std::string caption_problem(const data::MediaItem& item) {
  if (!item.problem.empty()) return item.problem;
  if (!item.caption) return "no caption";
  if (!is_valid_utf8(*item.caption)) return "its caption is not UTF-8";
  if (item.caption->find_first_not_of(" \t\r\n") == std::string::npos) return "its caption is empty";
  return {};
}

// The clips of one item: which frames (by the probe), then those frames
// decoded at the size asked for, as float tensors.
std::vector<at::Tensor> decode_clips(const data::MediaItem& item, const DatasetEncoderSettings& s,
                                     const std::vector<std::vector<int64_t>>& clips) {
  std::vector<int64_t> wanted;
  for (const auto& clip : clips) wanted.insert(wanted.end(), clip.begin(), clip.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  media::DecodeOptions options;
  options.size = s.size;
  options.limits = s.limits;
  options.threads = s.decode_threads;
  std::vector<media::Image> frames(wanted.size());
  media::decode_frames(item.media, wanted, options,
                       [&](size_t k, media::Image&& image) { frames[k] = std::move(image); });
  std::vector<at::Tensor> out;
  for (const auto& clip : clips) {
    std::vector<media::Image> picked;
    for (const int64_t index : clip)
      picked.push_back(frames[size_t(std::lower_bound(wanted.begin(), wanted.end(), index) - wanted.begin())]);
    out.push_back(frames_to_video(picked));
  }
  return out;
}

void decode_ahead(const std::vector<data::MediaItem>& items, const std::vector<int64_t>& shards,
                  const DatasetEncoderSettings& s, Handoff& handoff) {
  try {
    for (const int64_t k : shards) {
      const size_t first = size_t(k * s.items_per_shard),
                   end = std::min(items.size(), size_t((k + 1) * s.items_per_shard));
      ShardStart start;
      start.shard = k;
      std::vector<std::vector<std::vector<int64_t>>> clips(end - first);
      for (size_t i = first; i < end; ++i) {
        std::string problem = caption_problem(items[i]);
        if (problem.empty()) {
          try {
            const auto info = media::probe_media(items[i].media, s.limits);
            clips[i - first] = media::select_clips(info.times, s.selection);
            if (clips[i - first].empty())
              problem = fmt::format("too few frames: {} at {}, --frames {} needs {}", info.frames(),
                                    s.selection.fps > 0 ? fmt::format("{:g} fps", s.selection.fps) : "its own rate",
                                    s.selection.frames, s.selection.frames);
          } catch (const UsageError& e) {
            problem = without_path(e.what(), items[i].media);
          }
        }
        if (problem.empty()) {
          start.clips += int64_t(clips[i - first].size());
          start.usable.push_back(i);
        } else {
          start.problems.push_back(items[i].origin + ": " + problem);
        }
      }
      const auto usable = start.usable;
      handoff.put(std::move(start));
      for (const size_t i : usable) {
        if (handoff.stopped()) return;
        Prepared p;
        p.item = i;
        try {
          p.clips = decode_clips(items[i], s, clips[i - first]);
        } catch (const UsageError& e) {
          p.problem = without_path(e.what(), items[i].media);
        }
        handoff.put(std::move(p));
      }
    }
    handoff.put(Finished{});
  } catch (...) {
    handoff.fail(std::current_exception());
  }
}

nlohmann::json settings_json(const DatasetEncoderSettings& s) {
  return {{"listing", fs::absolute(s.listing).lexically_normal().string()},
          {"caption_extension", s.listing_options.caption_extension},
          {"frames", s.selection.frames},
          {"fps", s.selection.fps},
          {"frame_extraction", media::frame_extraction_name(s.selection.extraction)},
          {"frame_stride", s.selection.stride},
          {"frame_sample", s.selection.samples},
          {"size", fmt::format("{}x{}", s.size.width, s.size.height)},
          {"items_per_shard", s.items_per_shard},
          {"latent_dtype", data::to_string(s.latent_dtype)},
          {"emb_dtype", data::to_string(s.emb_dtype)},
          {"models", s.models_fingerprint}};
}

// Rank 0 readies the folder: new, or a run of the same settings to go on with.
void prepare_output(const DatasetEncoderSettings& s) {
  const std::string record = (fs::path(s.out) / "encode.json").string();
  const auto mine = settings_json(s);
  std::error_code ec;
  if (fs::exists(record, ec)) {
    nlohmann::json before;
    try {
      before = parse_json(read_whole_file(record));
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{}: not the record of a wandata encode run (unreadable JSON)", record));
    }
    for (const auto& [key, value] : mine.items())
      if (!before.contains(key) || before[key] != value)
        throw UsageError(fmt::format("{}: encoded with {} = {} before, {} now: another job; use another --out", s.out,
                                     key, before.contains(key) ? before[key].dump() : "(none)", value.dump()));
    return;
  }
  if (fs::exists(s.out, ec) && !fs::is_empty(s.out, ec))
    throw UsageError(fmt::format("{}: holds files but no encode.json: not a wandata encode run to go on with", s.out));
  fs::create_directories(s.out, ec);
  if (ec) throw UsageError(fmt::format("{}: cannot be created: {}", s.out, ec.message()));
  write_file_durably(record, mine.dump(2) + "\n");
}

}  // namespace

DatasetEncoderSummary encode_dataset(const DatasetEncoderSettings& s, WanVae& vae, TextEncoder& text,
                                     distributed::World& world) {
  const auto started = Clock::now();
  if (s.size.width % 16 || s.size.height % 16 || s.size.width < 16 || s.size.height < 16)
    throw UsageError(
        fmt::format("--size {}x{}: width and height must be multiples of 16 (the VAE's 8, then the "
                    "DiT's 2x2 patches)",
                    s.size.width, s.size.height));
  if (s.selection.frames < 1 || (s.selection.frames - 1) % 4)
    throw UsageError(fmt::format("--frames {}: Wan needs 4k + 1 frames (1, 5, 9, ... 81)", s.selection.frames));
  if (s.items_per_shard < 1) throw UsageError("--items-per-shard: must be at least 1");

  std::vector<data::MediaItem> items;
  world.agree([&] {
    items = data::list_media(s.listing, s.listing_options);
    if (world.is_root()) prepare_output(s);
  });
  const int64_t shards = (int64_t(items.size()) + s.items_per_shard - 1) / s.items_per_shard;
  std::vector<int64_t> mine;
  int64_t kept = 0;
  for (int64_t k = 0; k < shards; ++k) kept += fs::exists(record_path(s.out, k)) ? 1 : 0;
  for (int64_t k = world.rank(); k < shards; k += world.size()) {
    if (fs::exists(record_path(s.out, k))) continue;
    std::error_code ec;
    fs::remove(data::shard_path(s.out, k) + ".partial", ec);  // a killed run's unfinished shard
    mine.push_back(k);
  }
  int64_t my_items = 0;
  for (const int64_t k : mine)
    my_items += std::min<int64_t>(s.items_per_shard, int64_t(items.size()) - k * s.items_per_shard);

  const int64_t factor = vae->config().spatial_factor();
  const data::SampleShape shape{vae->config().z_dim,    vae->latent_frames(s.selection.frames),
                                s.size.height / factor, s.size.width / factor,
                                text.text_len(),        text.dim(),
                                s.latent_dtype,         s.emb_dtype};
  const auto device = vae->parameters().front().device();

  Handoff handoff;
  std::thread decoder(decode_ahead, std::cref(items), std::cref(mine), std::cref(s), std::ref(handoff));
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
  std::unique_ptr<data::ShardWriter> writer;
  ShardStart shard;
  int64_t row = 0, shard_items = 0, truncated = 0;
  std::vector<std::string> problems;
  auto finish_shard = [&] {
    const std::string path = data::shard_path(s.out, shard.shard);
    if (writer) {
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
    }
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& p : problems) skipped.push_back(p);
    const nlohmann::json record{{"shard", shard.shard},
                                {"items", shard_items},
                                {"samples", row},
                                {"truncated_prompts", truncated},
                                {"skipped", skipped}};
    write_file_durably(record_path(s.out, shard.shard), record.dump(2) + "\n");
  };
  auto skip = [&](const std::string& line) {
    if (s.strict) throw UsageError(line + " (--strict)");
    problems.push_back(line);
    progress.interrupt();
    report_warning("skipped {}", line);
  };

  for (bool running = true; running;) {
    const auto waiting = Clock::now();
    Work work = handoff.take();
    summary.waiting_seconds += seconds_since(waiting);
    if (auto* start = std::get_if<ShardStart>(&work)) {
      shard = std::move(*start);
      row = 0, truncated = 0;
      shard_items = int64_t(shard.problems.size() + shard.usable.size());
      problems.clear();
      for (const auto& p : shard.problems) skip(p);
      done_items += int64_t(shard.problems.size());
      progress.advance(int64_t(shard.problems.size()));
      if (shard.clips > 0)
        writer = std::make_unique<data::ShardWriter>(data::shard_path(s.out, shard.shard) + ".partial", shape,
                                                     shard.clips, /*with_prompt=*/true);
      if (shard.usable.empty()) finish_shard();
    } else if (auto* p = std::get_if<Prepared>(&work)) {
      const auto& item = items[p->item];
      test_delay("encode_item");
      if (!p->problem.empty()) {
        skip(item.origin + ": " + p->problem);
      } else {
        const auto text_start = Clock::now();
        auto encoded = text.encode({*item.caption});
        summary.text_seconds += seconds_since(text_start);
        truncated += encoded.truncated;
        for (const auto& clip : p->clips) {
          torch::NoGradGuard no_grad;
          const auto vae_start = Clock::now();
          const auto latents = vae->encode(clip.unsqueeze(0).to(device)).to(torch::kCPU);  // [1, z, t, h, w]
          summary.vae_seconds += seconds_since(vae_start);
          writer->write(row++, latents[0], encoded.embedding[0], encoded.lengths[0], *item.caption);
          ++done_samples;
        }
      }
      ++done_items;
      progress.advance();
      const bool last_of_shard = p->item == shard.usable.back();
      if (last_of_shard) finish_shard();
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
  summary.shards = shards;
  summary.shards_kept = kept;
  for (int64_t k = 0; k < shards; ++k) {
    const auto record = parse_json(read_whole_file(record_path(s.out, k)));
    summary.items += record.at("items").get<int64_t>();
    summary.samples += record.at("samples").get<int64_t>();
    summary.truncated_prompts += record.at("truncated_prompts").get<int64_t>();
    for (const auto& line : record.at("skipped")) summary.skipped.push_back(line.get<std::string>());
  }
  summary.seconds = seconds_since(started);
  return summary;
}

}  // namespace wt::wan
