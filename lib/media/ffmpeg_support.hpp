// What the media files share about FFmpeg (private to lib/media): owning
// handles, error text, and FFmpeg's log kept off the terminal. Library code
// never prints: FFmpeg's own error lines are captured per thread and become
// part of the one-line error that names the file.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <string>

namespace wt::media::ffmpeg {

struct FormatInputDeleter {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct ScaleDeleter {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using FormatInput = std::unique_ptr<AVFormatContext, FormatInputDeleter>;
using Codec = std::unique_ptr<AVCodecContext, CodecDeleter>;
using Frame = std::unique_ptr<AVFrame, FrameDeleter>;
using Packet = std::unique_ptr<AVPacket, PacketDeleter>;
using Scale = std::unique_ptr<SwsContext, ScaleDeleter>;

Frame make_frame();
Packet make_packet();

// Routes FFmpeg's log into a per-thread record (once per process); call
// before any FFmpeg work.
void capture_log();
// The text of an AVERROR code, with FFmpeg's last error line on this thread
// when there is one (it usually says more: "Picture size 9x9 is invalid").
std::string describe(int error);
void clear_last_log();

}  // namespace wt::media::ffmpeg
