// TensorBoard event files: what `tensorboard --logdir` reads, written by
// rank 0 into <output-dir>/tb/ (TFRecord framing of Event protobufs with the
// field numbers of TensorBoard's public schema, report/tensorboard.proto).
//
// Each start of a run opens a new file, events.out.tfevents.<time>.<host>.<pid>.
// A resumed run continues the step axis: the files already in the directory
// are first cut to the events at steps <= the resume step (rewritten whole by
// rename, so a crash leaves the old file), and the new file begins with a
// SessionLog START at the first new step, which makes a TensorBoard that had
// already loaded the old events drop those from that step on. So every step
// appears once, as in metrics.jsonl.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace wt::report {

struct Scalar {
  std::string tag;  // "train/loss": TensorBoard groups by the part before '/'
  double value = 0;
};

struct Image {
  int width = 0, height = 0;
  int colorspace = 1;  // 1 grey, 3 RGB, 4 RGBA
  std::string png;     // the encoded file
};

class TensorBoardWriter {
 public:
  // Creates `directory` if needed, cuts the event files in it to steps <=
  // `first_step` (0 for a fresh run: their events are removed, as a fresh
  // run's metrics.jsonl starts empty) and opens a new file. Error naming the
  // directory or file when it cannot.
  TensorBoardWriter(const std::string& directory, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appended and flushed, so that a live TensorBoard sees them.
  void scalars(int64_t step, const std::vector<Scalar>& values);
  void image(int64_t step, const std::string& tag, const Image& image);

  const std::string& path() const { return path_; }
  // What cutting the old files found: unreadable tails that were dropped.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  void write_event(const std::string& serialized);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> notes_;
};

}  // namespace wt::report
