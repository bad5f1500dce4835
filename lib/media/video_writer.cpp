#include "wantrain/media/video_writer.hpp"

extern "C" {
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "wantrain/media/ffmpeg_support.hpp"
#include "wantrain/util/error.hpp"

namespace wt::media {
namespace {

// The first pixel format the encoder takes that swscale can make; 4:2:0
// first when offered (what every player plays).
AVPixelFormat pick_format(const AVCodec* codec) {
  if (!codec->pix_fmts) return AV_PIX_FMT_YUV420P;
  for (const AVPixelFormat* f = codec->pix_fmts; *f != AV_PIX_FMT_NONE; ++f)
    if (*f == AV_PIX_FMT_YUV420P) return *f;
  for (const AVPixelFormat* f = codec->pix_fmts; *f != AV_PIX_FMT_NONE; ++f)
    if (sws_isSupportedOutput(*f)) return *f;
  return AV_PIX_FMT_NONE;
}

}  // namespace

struct VideoWriter::State {
  std::string path, partial;
  AVFormatContext* format = nullptr;
  ffmpeg::Codec encoder;
  AVStream* stream = nullptr;
  ffmpeg::Frame frame;
  ffmpeg::Packet packet;
  ffmpeg::Scale scale;
  int width = 0, height = 0;
  int64_t frames = 0;
  bool header_written = false, finished = false;

  void send(const AVFrame* f) {
    int e = avcodec_send_frame(encoder.get(), f);
    if (e < 0) throw Error(fmt::format("{}: encoding failed ({})", path, ffmpeg::describe(e)));
    for (;;) {
      e = avcodec_receive_packet(encoder.get(), packet.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) throw Error(fmt::format("{}: encoding failed ({})", path, ffmpeg::describe(e)));
      // One frame each: a packet without a duration makes the MP4 edit list end a frame early.
      if (packet->duration <= 0) packet->duration = 1;
      av_packet_rescale_ts(packet.get(), encoder->time_base, stream->time_base);
      packet->stream_index = stream->index;
      e = av_interleaved_write_frame(format, packet.get());
      if (e < 0) throw Error(fmt::format("{}: cannot be written ({})", path, ffmpeg::describe(e)));
    }
  }

  ~State() {
    if (format) {
      if (format->pb) avio_closep(&format->pb);
      avformat_free_context(format);
    }
    if (!finished && !partial.empty()) std::remove(partial.c_str());
  }
};

VideoWriter::VideoWriter(const std::string& path, int width, int height, const VideoWriterOptions& options)
    : state_(std::make_unique<State>()) {
  ffmpeg::capture_log();
  ffmpeg::clear_last_log();
  auto& s = *state_;
  s.path = path;
  s.partial = path + ".partial";
  s.width = width;
  s.height = height;
  if (width < 1 || height < 1)
    throw UsageError(fmt::format("{}: a video needs a size, got {}x{}", path, width, height));
  // The container from the name asked for, not from the .partial name written.
  const AVOutputFormat* container = av_guess_format(nullptr, path.c_str(), nullptr);
  if (!container || container->video_codec == AV_CODEC_ID_NONE)
    throw UsageError(fmt::format("{}: no video container FFmpeg writes has this extension (try .mp4)", path));
  if (std::string(container->name) == "image2")
    throw UsageError(fmt::format("{}: an image, not a video (PNG frames go to a folder: --frames-dir)", path));
  int e = avformat_alloc_output_context2(&s.format, container, nullptr, s.partial.c_str());
  if (e < 0) throw UsageError(fmt::format("{}: {}", path, ffmpeg::describe(e)));
  const AVCodec* codec = options.codec.empty() ? avcodec_find_encoder(container->video_codec)
                                               : avcodec_find_encoder_by_name(options.codec.c_str());
  if (!codec || codec->type != AVMEDIA_TYPE_VIDEO)
    throw UsageError(fmt::format("{}: FFmpeg has no video encoder {}", path,
                                 options.codec.empty() ? avcodec_get_name(container->video_codec) : options.codec));
  const AVPixelFormat pixels = pick_format(codec);
  if (pixels == AV_PIX_FMT_NONE)
    throw UsageError(fmt::format("{}: the encoder {} takes no pixel format wantrain makes", path, codec->name));
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(pixels);
  if ((width % (1 << desc->log2_chroma_w)) || (height % (1 << desc->log2_chroma_h)))
    throw UsageError(fmt::format("{}: {} in {} needs a size divisible by {}x{}, got {}x{}", path, codec->name,
                                 desc->name, 1 << desc->log2_chroma_w, 1 << desc->log2_chroma_h, width, height));
  s.encoder.reset(avcodec_alloc_context3(codec));
  if (!s.encoder) throw Error("ffmpeg: out of memory for an encoder");
  s.encoder->width = width;
  s.encoder->height = height;
  s.encoder->pix_fmt = pixels;
  const AVRational rate = av_d2q(options.fps > 0 ? options.fps : 16, 100000);
  s.encoder->time_base = av_inv_q(rate);
  s.encoder->framerate = rate;
  s.encoder->thread_count = 1;
  if (s.format->oformat->flags & AVFMT_GLOBALHEADER) s.encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* settings = nullptr;
  if (codec->id == AV_CODEC_ID_H264 || codec->id == AV_CODEC_ID_VP9 || codec->id == AV_CODEC_ID_HEVC) {
    av_dict_set_int(&settings, "crf", options.quality, 0);
    if (codec->id == AV_CODEC_ID_VP9) av_dict_set(&settings, "b", "0", 0);  // constant quality
  }
  e = avcodec_open2(s.encoder.get(), codec, &settings);
  av_dict_free(&settings);
  if (e < 0)
    throw UsageError(fmt::format("{}: the encoder {} cannot start ({})", path, codec->name, ffmpeg::describe(e)));
  s.stream = avformat_new_stream(s.format, nullptr);
  if (!s.stream) throw Error("ffmpeg: out of memory for a stream");
  s.stream->time_base = s.encoder->time_base;
  avcodec_parameters_from_context(s.stream->codecpar, s.encoder.get());
  e = avio_open(&s.format->pb, s.partial.c_str(), AVIO_FLAG_WRITE);
  if (e < 0) throw UsageError(fmt::format("{}: cannot be written ({})", s.partial, ffmpeg::describe(e)));
  e = avformat_write_header(s.format, nullptr);
  if (e < 0) throw UsageError(fmt::format("{}: the container cannot start ({})", path, ffmpeg::describe(e)));
  s.header_written = true;
  s.frame = ffmpeg::make_frame();
  s.frame->format = pixels;
  s.frame->width = width;
  s.frame->height = height;
  if (av_frame_get_buffer(s.frame.get(), 0) < 0) throw Error("ffmpeg: out of memory for a frame");
  s.packet = ffmpeg::make_packet();
}

VideoWriter::~VideoWriter() = default;

int64_t VideoWriter::frames() const { return state_->frames; }

void VideoWriter::write(const Image& rgb) {
  auto& s = *state_;
  if (rgb.width != s.width || rgb.height != s.height || rgb.channels != 3)
    throw Error(fmt::format("{}: a {}x{} frame of {} channels in a {}x{} RGB video", s.path, rgb.width, rgb.height,
                            rgb.channels, s.width, s.height));
  if (av_frame_make_writable(s.frame.get()) < 0) throw Error("ffmpeg: out of memory for a frame");
  s.scale.reset(sws_getCachedContext(s.scale.release(), s.width, s.height, AV_PIX_FMT_RGB24, s.width, s.height,
                                     s.encoder->pix_fmt, SWS_AREA | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, nullptr,
                                     nullptr, nullptr));
  if (!s.scale) throw Error(fmt::format("{}: no conversion from RGB to the encoder's pixels", s.path));
  const uint8_t* planes[4] = {rgb.pixels.data(), nullptr, nullptr, nullptr};
  const int strides[4] = {s.width * 3, 0, 0, 0};
  sws_scale(s.scale.get(), planes, strides, 0, s.height, s.frame->data, s.frame->linesize);
  s.frame->pts = s.frames++;
  s.send(s.frame.get());
}

void VideoWriter::finish() {
  auto& s = *state_;
  if (s.finished) return;
  s.send(nullptr);  // the frames the encoder holds back
  int e = av_write_trailer(s.format);
  if (e < 0) throw Error(fmt::format("{}: cannot be finished ({})", s.path, ffmpeg::describe(e)));
  avio_closep(&s.format->pb);
  std::error_code ec;
  std::filesystem::rename(s.partial, s.path, ec);
  if (ec) throw Error(fmt::format("{}: cannot be renamed into place ({})", s.path, ec.message()));
  s.finished = true;
}

std::string encode_png(const Image& image) {
  ffmpeg::capture_log();
  if (image.width < 1 || image.height < 1 || (image.channels != 3 && image.channels != 1) ||
      image.pixels.size() != size_t(image.width) * image.height * image.channels)
    throw Error(fmt::format("png: {} bytes do not make a {}x{} image of {} channels", image.pixels.size(), image.width,
                            image.height, image.channels));
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  if (!codec) throw Error("ffmpeg: no PNG encoder");
  ffmpeg::Codec ctx(avcodec_alloc_context3(codec));
  ctx->width = image.width;
  ctx->height = image.height;
  ctx->pix_fmt = image.channels == 3 ? AV_PIX_FMT_RGB24 : AV_PIX_FMT_GRAY8;
  ctx->time_base = AVRational{1, 1};
  int e = avcodec_open2(ctx.get(), codec, nullptr);
  if (e < 0) throw Error(fmt::format("png: the encoder cannot start ({})", ffmpeg::describe(e)));
  auto frame = ffmpeg::make_frame();
  frame->width = image.width;
  frame->height = image.height;
  frame->format = ctx->pix_fmt;
  frame->data[0] = const_cast<uint8_t*>(image.pixels.data());
  frame->linesize[0] = image.width * image.channels;
  e = avcodec_send_frame(ctx.get(), frame.get());
  frame->data[0] = nullptr;
  if (e < 0) throw Error(fmt::format("png: encoding failed ({})", ffmpeg::describe(e)));
  auto packet = ffmpeg::make_packet();
  e = avcodec_receive_packet(ctx.get(), packet.get());
  if (e < 0) throw Error(fmt::format("png: encoding failed ({})", ffmpeg::describe(e)));
  return std::string(reinterpret_cast<const char*>(packet->data), size_t(packet->size));
}

void write_png(const std::string& path, const Image& image) {
  const std::string bytes = encode_png(image), partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out.flush()) {
      std::remove(partial.c_str());
      throw UsageError(fmt::format("{}: cannot be written", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) {
    std::remove(partial.c_str());
    throw UsageError(fmt::format("{}: cannot be written ({})", path, ec.message()));
  }
}

}  // namespace wt::media
