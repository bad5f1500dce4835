#include "wantrain/media/ffmpeg_support.hpp"

extern "C" {
#include <libavutil/log.h>
}

#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "wantrain/util/error.hpp"

namespace wt::media::ffmpeg {
namespace {

thread_local std::string last_log;

void on_log(void* object, int level, const char* format, va_list args) {
  if (level > AV_LOG_ERROR) return;  // warnings and chatter are dropped
  char line[512];
  int prefix = 0;  // no "[png @ 0x55...]": the address means nothing to a user
  av_log_format_line2(object, level, format, args, line, sizeof line, &prefix);
  std::string text(line);
  const AVClass* kind = object ? *static_cast<const AVClass* const*>(object) : nullptr;
  if (kind && kind->item_name) text = std::string(kind->item_name(object)) + ": " + text;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (!text.empty()) last_log = text;
}

}  // namespace

Frame make_frame() {
  Frame f(av_frame_alloc());
  if (!f) throw Error("ffmpeg: out of memory for a frame");
  return f;
}

Packet make_packet() {
  Packet p(av_packet_alloc());
  if (!p) throw Error("ffmpeg: out of memory for a packet");
  return p;
}

void capture_log() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(on_log); });
}

void clear_last_log() { last_log.clear(); }

std::string describe(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(error, text, sizeof text);
  std::string out(text);
  if (!last_log.empty() && last_log.find(out) == std::string::npos) out += ": " + last_log;
  return out;
}

}  // namespace wt::media::ffmpeg
