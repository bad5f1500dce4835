#include "wantrain/media/media_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "wantrain/media/ffmpeg_support.hpp"

extern "C" {
#include <libavutil/pixdesc.h>
}
#include "wantrain/util/error.hpp"

namespace wt::media {
namespace {

struct Input {
  ffmpeg::FormatInput format;
  int stream = -1;
};

// Opens `path`, finds its video (or picture) stream and checks the header
// against the limits; the probing decoders get the pixel limit too, so a
// header claiming a gigapixel is refused before a frame is allocated.
Input open_input(const std::string& path, const MediaLimits& limits) {
  ffmpeg::capture_log();
  ffmpeg::clear_last_log();
  AVFormatContext* raw = nullptr;
  int e = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  if (e < 0) throw UsageError(fmt::format("{}: not a video or image FFmpeg reads ({})", path, ffmpeg::describe(e)));
  Input in{ffmpeg::FormatInput(raw)};
  std::vector<AVDictionary*> options(in.format->nb_streams, nullptr);
  for (auto& o : options) av_dict_set_int(&o, "max_pixels", limits.max_pixels, 0);
  e = avformat_find_stream_info(in.format.get(), options.empty() ? nullptr : options.data());
  for (auto& o : options) av_dict_free(&o);
  if (e < 0) throw UsageError(fmt::format("{}: its streams cannot be read ({})", path, ffmpeg::describe(e)));
  in.stream = av_find_best_stream(in.format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (in.stream < 0) throw UsageError(fmt::format("{}: holds no video or picture", path));
  const AVCodecParameters* par = in.format->streams[in.stream]->codecpar;
  if (par->width <= 0 || par->height <= 0)
    throw UsageError(fmt::format("{}: no picture FFmpeg can read ({}): corrupt, or over --max-pixels {}", path,
                                 ffmpeg::describe(AVERROR_INVALIDDATA), limits.max_pixels));
  if (int64_t(par->width) * par->height > limits.max_pixels)
    throw UsageError(fmt::format("{}: {}x{} pixels is over the limit of {} a picture (--max-pixels)", path, par->width,
                                 par->height, limits.max_pixels));
  const int64_t claimed = in.format->streams[in.stream]->nb_frames;
  if (claimed > limits.max_frames)
    throw UsageError(fmt::format("{}: {} frames by its header, over the limit of {} (--max-frames)", path, claimed,
                                 limits.max_frames));
  return in;
}

ffmpeg::Codec open_decoder(const std::string& path, const Input& in, const DecodeOptions& options) {
  const AVStream* st = in.format->streams[in.stream];
  const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
  if (!codec)
    throw UsageError(fmt::format("{}: no decoder for its codec ({})", path, avcodec_get_name(st->codecpar->codec_id)));
  ffmpeg::Codec ctx(avcodec_alloc_context3(codec));
  if (!ctx) throw Error("ffmpeg: out of memory for a decoder");
  int e = avcodec_parameters_to_context(ctx.get(), st->codecpar);
  if (e < 0) throw UsageError(fmt::format("{}: {}", path, ffmpeg::describe(e)));
  ctx->max_pixels = options.limits.max_pixels;
  ctx->thread_count = std::max(1, options.threads);
  ctx->thread_type = FF_THREAD_FRAME;
  ctx->pkt_timebase = st->time_base;
  e = avcodec_open2(ctx.get(), codec, nullptr);
  if (e < 0)
    throw UsageError(fmt::format("{}: its decoder ({}) cannot start ({})", path, codec->name, ffmpeg::describe(e)));
  return ctx;
}

// One decoded frame as RGB at the cover size, then centre-cropped.
Image to_rgb(const AVFrame* frame, FrameSize size, ffmpeg::Scale& scale) {
  const int w = frame->width, h = frame->height;
  int cover_w = w, cover_h = h;
  if (size.width > 0 && size.height > 0) {
    const double factor = std::max(double(size.width) / w, double(size.height) / h);
    cover_w = std::max(size.width, int(std::lround(w * factor)));
    cover_h = std::max(size.height, int(std::lround(h * factor)));
  }
  SwsContext* s =
      sws_getCachedContext(scale.release(), w, h, AVPixelFormat(frame->format), cover_w, cover_h, AV_PIX_FMT_RGB24,
                           SWS_AREA | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
  scale.reset(s);
  if (!s)
    throw Error(fmt::format("ffmpeg: no conversion from {} {}x{} to RGB",
                            av_get_pix_fmt_name(AVPixelFormat(frame->format)), w, h));
  Image cover(cover_w, cover_h);
  uint8_t* planes[4] = {cover.pixels.data(), nullptr, nullptr, nullptr};
  int strides[4] = {cover_w * 3, 0, 0, 0};
  sws_scale(s, frame->data, frame->linesize, 0, h, planes, strides);
  if (size.width <= 0 || size.height <= 0 || (cover_w == size.width && cover_h == size.height)) return cover;
  Image out(size.width, size.height);
  const int x0 = (cover_w - size.width) / 2, y0 = (cover_h - size.height) / 2;
  for (int y = 0; y < size.height; ++y)
    std::memcpy(out.row(y), cover.row(y0 + y) + size_t(x0) * 3, size_t(size.width) * 3);
  return out;
}

}  // namespace

double MediaInfo::fps() const {
  if (times.size() < 2 || times.back() <= times.front()) return 0;
  return double(times.size() - 1) / (times.back() - times.front());
}

MediaInfo probe_media(const std::string& path, const MediaLimits& limits) {
  Input in = open_input(path, limits);
  const AVStream* st = in.format->streams[in.stream];
  MediaInfo info;
  info.path = path;
  info.format = in.format->iformat->name;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  info.width = st->codecpar->width;
  info.height = st->codecpar->height;
  // Every packet of the stream is a frame: their timestamps, without decoding.
  const double base = av_q2d(st->time_base);
  const AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
  auto packet = ffmpeg::make_packet();
  int e = 0;
  while ((e = av_read_frame(in.format.get(), packet.get())) >= 0) {
    if (packet->stream_index == in.stream && !(packet->flags & AV_PKT_FLAG_DISCARD)) {
      const int64_t stamp = packet->pts != AV_NOPTS_VALUE ? packet->pts : packet->dts;
      const double t = stamp != AV_NOPTS_VALUE ? double(stamp) * base
                       : rate.num > 0          ? double(info.times.size()) / av_q2d(rate)
                                               : double(info.times.size());
      info.times.push_back(t);
      if (int64_t(info.times.size()) > limits.max_frames)
        throw UsageError(
            fmt::format("{}: more than {} frames, over the limit (--max-frames)", path, limits.max_frames));
    }
    av_packet_unref(packet.get());
  }
  if (e != AVERROR_EOF) throw UsageError(fmt::format("{}: cannot be read to its end ({})", path, ffmpeg::describe(e)));
  if (info.times.empty()) throw UsageError(fmt::format("{}: holds no frames", path));
  std::sort(info.times.begin(), info.times.end());
  info.still = info.times.size() == 1;
  return info;
}

void decode_frames(const std::string& path, const std::vector<int64_t>& indices, const DecodeOptions& options,
                   const std::function<void(size_t k, Image&& frame)>& each) {
  if (indices.empty()) return;
  if (!std::is_sorted(indices.begin(), indices.end()) || indices.front() < 0)
    throw Error("decode_frames: indices must ascend from 0");
  Input in = open_input(path, options.limits);
  auto decoder = open_decoder(path, in, options);
  auto packet = ffmpeg::make_packet();
  auto frame = ffmpeg::make_frame();
  ffmpeg::Scale scale;
  size_t k = 0;
  int64_t index = 0;  // frames decoded so far, in presentation order
  auto drain = [&]() {
    for (;;) {
      const int e = avcodec_receive_frame(decoder.get(), frame.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) throw UsageError(fmt::format("{}: frame {} cannot be decoded ({})", path, index, ffmpeg::describe(e)));
      if (k < indices.size() && indices[k] == index) {
        Image image = to_rgb(frame.get(), options.size, scale);
        while (k + 1 < indices.size() && indices[k + 1] == index) each(k++, Image(image));  // a repeated frame
        each(k++, std::move(image));
      }
      av_frame_unref(frame.get());
      if (++index > options.limits.max_frames)
        throw UsageError(
            fmt::format("{}: more than {} frames, over the limit (--max-frames)", path, options.limits.max_frames));
      if (k == indices.size()) return;
    }
  };
  int e = 0;
  while (k < indices.size() && (e = av_read_frame(in.format.get(), packet.get())) >= 0) {
    if (packet->stream_index == in.stream) {
      const int sent = avcodec_send_packet(decoder.get(), packet.get());
      av_packet_unref(packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN))
        throw UsageError(fmt::format("{}: frame {} cannot be decoded ({})", path, index, ffmpeg::describe(sent)));
      drain();
    } else {
      av_packet_unref(packet.get());
    }
  }
  if (k < indices.size()) {
    if (e < 0 && e != AVERROR_EOF)
      throw UsageError(fmt::format("{}: cannot be read past frame {} ({})", path, index, ffmpeg::describe(e)));
    avcodec_send_packet(decoder.get(), nullptr);  // flush the frames the decoder holds back
    drain();
  }
  if (k < indices.size())
    throw UsageError(fmt::format("{}: ends after {} decodable frames; frame {} was asked for (truncated?)", path, index,
                                 indices[k]));
}

Image resize_cover(const Image& image, FrameSize size) {
  if (image.channels != 3) throw Error("resize_cover: RGB images only");
  auto frame = ffmpeg::make_frame();
  frame->width = image.width;
  frame->height = image.height;
  frame->format = AV_PIX_FMT_RGB24;
  frame->data[0] = const_cast<uint8_t*>(image.pixels.data());
  frame->linesize[0] = image.width * 3;
  ffmpeg::Scale scale;
  Image out = to_rgb(frame.get(), size, scale);
  frame->data[0] = nullptr;
  return out;
}

}  // namespace wt::media
