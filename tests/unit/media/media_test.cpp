// lib/media: frame selection arithmetic, decoding against the ffmpeg CLI's
// own frames, resizing, limits and bad files, and the writers read back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../../common/launch.hpp"
#include "wantrain/media/frame_selection.hpp"
#include "wantrain/media/media_reader.hpp"
#include "wantrain/media/video_writer.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::media::DecodeOptions;
using wt::media::FrameExtraction;
using wt::media::FrameSelection;
using wt::media::Image;

std::vector<double> at_rate(int frames, double fps) {
  std::vector<double> t(frames);
  for (int i = 0; i < frames; ++i) t[i] = i / fps;
  return t;
}

std::vector<int64_t> starts(const std::vector<std::vector<int64_t>>& clips) {
  std::vector<int64_t> s;
  for (const auto& c : clips) s.push_back(c.front());
  return s;
}

std::string dir_for(const std::string& name) {
  const auto dir = wt::testing::fresh("media-" + name);
  std::filesystem::create_directories(dir);
  return dir;
}

// The ffmpeg CLI makes these tests' files and is their reference. A build
// from scripts/pack-deps.sh's archive has FFmpeg's libraries but not the CLI
// (it would double the archive): there the tests that need it are skipped.
bool have_ffmpeg_cli() {
  static const bool have = wt::testing::launch("ffmpeg -hide_banner -version").status == 0;
  return have;
}
#define SKIP_WITHOUT_FFMPEG_CLI()                                                                     \
  do {                                                                                                \
    if (!have_ffmpeg_cli())                                                                           \
      GTEST_SKIP() << "needs the ffmpeg CLI (Debian's ffmpeg package): its frames are the reference"; \
  } while (false)

void ffmpeg(const std::string& args) {
  const auto job = wt::testing::launch("ffmpeg -hide_banner -loglevel error -y " + args);
  ASSERT_EQ(job.status, 0) << args << "\n" << job.output;
}

std::vector<Image> decode_all(const std::string& path, DecodeOptions options = {}) {
  const auto info = wt::media::probe_media(path, options.limits);
  std::vector<int64_t> all(info.frames());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  std::vector<Image> frames;
  wt::media::decode_frames(path, all, options, [&](size_t, Image&& f) { frames.push_back(std::move(f)); });
  return frames;
}

std::string one_line_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// The windows of musubi-tuner's documentation: a 40-frame video, N = 13.
TEST(FrameSelection, HeadSlideAndUniformTakeTheWindowsMusubiTunerDocuments) {
  const auto t = at_rate(40, 16);
  FrameSelection s;
  s.frames = 13;
  EXPECT_EQ(starts(select_clips(t, s)), std::vector<int64_t>({0}));
  s.extraction = FrameExtraction::Slide;
  s.stride = 10;
  EXPECT_EQ(starts(select_clips(t, s)), std::vector<int64_t>({0, 10, 20}));  // 30 + 13 > 40
  s.extraction = FrameExtraction::Uniform;
  s.samples = 4;
  EXPECT_EQ(starts(select_clips(t, s)), std::vector<int64_t>({0, 9, 18, 27}));  // 27 = 40 - 13, in 3 steps
  s.frames = 25;
  EXPECT_EQ(starts(select_clips(t, s)), std::vector<int64_t>({0, 5, 10, 15}));
  s.frames = 1;
  EXPECT_EQ(starts(select_clips(t, s)), std::vector<int64_t>({0, 13, 26, 39}));
  const auto clip = select_clips(t, s)[1];
  EXPECT_EQ(clip, std::vector<int64_t>({13}));
  s.frames = 41;
  EXPECT_TRUE(select_clips(t, s).empty());  // too few frames: no clip
  // Fewer distinct windows than clips asked for: each once (a still gives
  // one clip; 40 frames hold two windows of 39, not four).
  s.frames = 1;
  EXPECT_EQ(starts(select_clips(at_rate(1, 16), s)), std::vector<int64_t>({0}));
  s.frames = 39;
  EXPECT_EQ(starts(select_clips(t, s)), std::vector<int64_t>({0, 1}));
  EXPECT_EQ(wt::media::parse_frame_extraction("slide"), FrameExtraction::Slide);
  EXPECT_THROW(wt::media::parse_frame_extraction("chunk"), wt::UsageError);
}

TEST(FrameSelection, AFrameRateIsResampledByTimestamps) {
  // 30 -> 15 fps keeps every other frame; 10 -> 20 shows each frame twice;
  // 30 -> 16 picks the frame on screen at each 1/16 s.
  EXPECT_EQ(wt::media::resample_frames(at_rate(7, 30), 15), std::vector<int64_t>({0, 2, 4, 6}));
  EXPECT_EQ(wt::media::resample_frames(at_rate(3, 10), 20), std::vector<int64_t>({0, 0, 1, 1, 2}));
  const auto picked = wt::media::resample_frames(at_rate(31, 30), 16);  // 1 s
  ASSERT_EQ(picked.size(), 17u);
  for (size_t i = 0; i < picked.size(); ++i) EXPECT_EQ(picked[i], int64_t(std::floor(i * 30.0 / 16 + 1e-9)));
  // Timestamps off by rounding (a 1/90000 time base) still land on their frame.
  std::vector<double> rounded = at_rate(5, 30);
  for (auto& x : rounded) x = std::round(x * 90000 - 1) / 90000;
  EXPECT_EQ(wt::media::resample_frames(rounded, 30), std::vector<int64_t>({0, 1, 2, 3, 4}));
}

// Lossless RGB (FFV1 in Matroska, PNG, an RGB GIF palette) decodes to the
// very bytes the ffmpeg CLI gives.
TEST(MediaReader, LosslessFilesDecodeToTheFfmpegCliFrames) {
  SKIP_WITHOUT_FFMPEG_CLI();
  const auto dir = dir_for("lossless");
  ffmpeg("-f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 12 -c:v ffv1 -pix_fmt bgr0 " + dir + "/clip.mkv");
  ffmpeg("-f lavfi -i testsrc2=size=40x30:rate=1 -frames:v 1 " + dir + "/still.png");
  for (const std::string name : {"clip.mkv", "still.png"}) {
    SCOPED_TRACE(name);
    const std::string path = dir + "/" + name;
    ffmpeg("-i " + path + " -f rawvideo -pix_fmt rgb24 " + path + ".rgb");
    const std::string cli = wt::testing::read_text(path + ".rgb");
    const auto frames = decode_all(path);
    std::string ours;
    for (const auto& f : frames) ours.append(reinterpret_cast<const char*>(f.pixels.data()), f.pixels.size());
    EXPECT_EQ(ours.size(), cli.size());
    EXPECT_TRUE(ours == cli) << "the decoded bytes differ from the ffmpeg CLI's";
  }
  const auto info = wt::media::probe_media(dir + "/clip.mkv");
  EXPECT_EQ(info.frames(), 12);
  EXPECT_EQ(info.width, 64);
  EXPECT_EQ(info.height, 48);
  EXPECT_EQ(info.codec, "ffv1");
  EXPECT_NEAR(info.fps(), 10, 1e-6);
  EXPECT_FALSE(info.still);
  EXPECT_TRUE(wt::media::probe_media(dir + "/still.png").still);
}

// H.264 4:2:0 (lossy in colour) matches the CLI's conversion with the same
// swscale flags, and chosen frames are the frames at those positions.
TEST(MediaReader, ChosenFramesOfAnH264VideoAreThoseFramesOfTheCli) {
  SKIP_WITHOUT_FFMPEG_CLI();
  const auto dir = dir_for("h264");
  const std::string path = dir + "/clip.mp4";
  ffmpeg("-f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 12 -c:v libx264 -pix_fmt yuv420p " + path);
  ffmpeg("-i " + path + " -sws_flags area+accurate_rnd+full_chroma_int -f rawvideo -pix_fmt rgb24 " + path + ".rgb");
  const std::string cli = wt::testing::read_text(path + ".rgb");
  const size_t frame_bytes = 64 * 48 * 3;
  ASSERT_EQ(cli.size(), 12 * frame_bytes);
  const std::vector<int64_t> chosen{1, 4, 4, 11};
  std::vector<Image> frames;
  wt::media::decode_frames(path, chosen, {}, [&](size_t k, Image&& f) {
    EXPECT_EQ(k, frames.size());
    frames.push_back(std::move(f));
  });
  ASSERT_EQ(frames.size(), chosen.size());
  for (size_t k = 0; k < chosen.size(); ++k) {
    int worst = 0;
    for (size_t i = 0; i < frame_bytes; ++i)
      worst = std::max(worst, std::abs(int(frames[k].pixels[i]) - int(uint8_t(cli[chosen[k] * frame_bytes + i]))));
    EXPECT_LE(worst, 1) << "frame " << chosen[k];  // the same conversion; 1 level for rounding in another path
  }
}

// Cover and crop: the aspect ratio is kept and the middle kept; the area
// filter averages what it covers, so a 1-pixel checkerboard halved is flat
// grey instead of aliasing into stripes.
TEST(MediaReader, ResizingCoversTheSizeCropsTheMiddleAndDoesNotAlias) {
  Image board(64, 32);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 64; ++x)
      for (int c = 0; c < 3; ++c) board.row(y)[x * 3 + c] = ((x + y) % 2) ? 255 : 0;
  const auto half = wt::media::resize_cover(board, {32, 16});
  ASSERT_EQ(half.width, 32);
  ASSERT_EQ(half.height, 16);
  for (uint8_t v : half.pixels) EXPECT_NEAR(int(v), 128, 1);
  // A 64x32 picture, left half black, right half white, into 16x16: scaled to
  // 32x16, then the middle 16 columns: 8 black, 8 white.
  Image halves(64, 32);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 64; ++x)
      for (int c = 0; c < 3; ++c) halves.row(y)[x * 3 + c] = x < 32 ? 0 : 255;
  const auto square = wt::media::resize_cover(halves, {16, 16});
  ASSERT_EQ(square.width, 16);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) EXPECT_EQ(int(square.row(y)[x * 3]), x < 8 ? 0 : 255) << x << "," << y;
}

TEST(MediaReader, LimitsAndBadFilesAreOneLineNamingTheFile) {
  SKIP_WITHOUT_FFMPEG_CLI();
  const auto dir = dir_for("bad");
  const std::string clip = dir + "/clip.mp4";
  ffmpeg("-f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 12 -c:v libx264 -pix_fmt yuv420p " + clip);
  DecodeOptions small;
  small.limits.max_pixels = 64 * 47;
  auto e = one_line_error([&] { wt::media::probe_media(clip, small.limits); });
  EXPECT_NE(e.find(clip + ": 64x48 pixels is over the limit of 3008"), std::string::npos) << e;
  wt::media::MediaLimits few;
  few.max_frames = 5;
  e = one_line_error([&] { wt::media::probe_media(clip, few); });
  EXPECT_EQ(e.rfind(clip + ": ", 0), 0u) << e;
  EXPECT_NE(e.find("over the limit of 5 (--max-frames)"), std::string::npos) << e;  // the header says 12
  // A stream whose header does not count its frames (raw H.264) is counted as it is read.
  ffmpeg("-i " + clip + " -c copy -f h264 " + dir + "/clip.h264");
  e = one_line_error([&] { wt::media::probe_media(dir + "/clip.h264", few); });
  EXPECT_NE(e.find(dir + "/clip.h264: more than 5 frames, over the limit (--max-frames)"), std::string::npos) << e;

  // A PNG whose header claims 100000 x 100000 pixels, with a few bytes of data.
  const std::string huge = dir + "/huge.png";
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) +
      " -c \"import struct, zlib\n"
      "def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))\n"
      "open('" +
      huge +
      "', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 100000, 100000, 8, 2, 0, 0, "
      "0)) + chunk(b'IDAT', zlib.compress(b'\\0' * 64)) + chunk(b'IEND', b''))\"");
  ASSERT_EQ(job.status, 0) << job.output;
  e = one_line_error([&] { decode_all(huge); });
  EXPECT_EQ(e.rfind(huge + ": ", 0), 0u) << e;

  std::ofstream(dir + "/notes.mp4") << "not a video at all\n";
  e = one_line_error([&] { wt::media::probe_media(dir + "/notes.mp4"); });
  EXPECT_NE(e.find(dir + "/notes.mp4: not a video or image FFmpeg reads"), std::string::npos) << e;
  std::ofstream(dir + "/empty.mkv");
  e = one_line_error([&] { wt::media::probe_media(dir + "/empty.mkv"); });
  EXPECT_EQ(e.rfind(dir + "/empty.mkv: ", 0), 0u) << e;
  e = one_line_error([&] { wt::media::probe_media(dir + "/missing.mp4"); });
  EXPECT_NE(e.find("No such file"), std::string::npos) << e;

  // Every cut of a video and of a PNG is an error line or fewer frames, never a crash.
  for (const std::string name : {"clip.mp4", "huge.png"}) {
    const std::string whole = wt::testing::read_text(dir + "/" + name);
    for (size_t cut = 0; cut < whole.size(); cut += std::max<size_t>(1, whole.size() / 23)) {
      const std::string path = dir + "/cut-" + std::to_string(cut) + "-" + name;
      std::ofstream(path, std::ios::binary).write(whole.data(), std::streamsize(cut));
      try {
        decode_all(path);
      } catch (const wt::UsageError& error) {
        EXPECT_EQ(std::string(error.what()).rfind(path + ": ", 0), 0u) << error.what();
        EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
      }
    }
  }
  // Asking past the end says the file is short.
  e = one_line_error([&] { wt::media::decode_frames(clip, {3, 20}, {}, [](size_t, Image&&) {}); });
  EXPECT_NE(e.find("ends after 12 decodable frames; frame 20 was asked for"), std::string::npos) << e;
}

TEST(VideoWriter, AnMp4AndPngsReadBackAsWritten) {
  const auto dir = dir_for("writer");
  std::vector<Image> frames;
  for (int f = 0; f < 9; ++f) {
    Image image(64, 48);
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 64; ++x) {
        uint8_t* p = image.row(y) + x * 3;
        p[0] = uint8_t(4 * x), p[1] = uint8_t(5 * y), p[2] = uint8_t(25 * f);  // smooth: H.264 keeps it well
      }
    frames.push_back(std::move(image));
  }
  {
    wt::media::VideoWriter writer(dir + "/out.mp4", 64, 48);
    for (const auto& f : frames) writer.write(f);
    EXPECT_FALSE(std::filesystem::exists(dir + "/out.mp4"));  // only the .partial until finished
    writer.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.mp4.partial"));
  const auto info = wt::media::probe_media(dir + "/out.mp4");
  EXPECT_EQ(info.codec, "h264");
  EXPECT_EQ(info.frames(), 9);
  EXPECT_NEAR(info.fps(), 16, 1e-6);
  const auto back = decode_all(dir + "/out.mp4");
  ASSERT_EQ(back.size(), frames.size());
  double squared = 0;
  for (size_t f = 0; f < frames.size(); ++f)
    for (size_t i = 0; i < frames[f].pixels.size(); ++i)
      squared += std::pow(double(back[f].pixels[i]) - frames[f].pixels[i], 2);
  const double psnr = 10 * std::log10(255.0 * 255.0 / (squared / (9.0 * 64 * 48 * 3)));
  EXPECT_GT(psnr, 35) << "CRF 18 on a smooth picture";

  // An unfinished writer leaves nothing under either name.
  {
    wt::media::VideoWriter writer(dir + "/abandoned.mkv", 64, 48);
    writer.write(frames[0]);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/abandoned.mkv"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/abandoned.mkv.partial"));
  auto e = one_line_error([&] { wt::media::VideoWriter(dir + "/odd.mp4", 63, 48); });
  EXPECT_NE(e.find("needs a size divisible by 2x2"), std::string::npos) << e;
  e = one_line_error([&] { wt::media::VideoWriter(dir + "/frames.png", 64, 48); });
  EXPECT_NE(e.find("--frames-dir"), std::string::npos) << e;
  e = one_line_error([&] { wt::media::VideoWriter(dir + "/out.nosuchformat", 64, 48); });
  EXPECT_NE(e.find("no video container"), std::string::npos) << e;

  // PNG is lossless, RGB and greyscale.
  wt::media::write_png(dir + "/frame.png", frames[3]);
  EXPECT_EQ(decode_all(dir + "/frame.png").at(0).pixels, frames[3].pixels);
  Image grey(5, 3, 1);
  for (size_t i = 0; i < grey.pixels.size(); ++i) grey.pixels[i] = uint8_t(17 * i);
  wt::media::write_png(dir + "/grey.png", grey);
  const auto grey_back = decode_all(dir + "/grey.png").at(0);
  for (size_t i = 0; i < grey.pixels.size(); ++i) EXPECT_EQ(grey_back.pixels[i * 3], grey.pixels[i]);
}
