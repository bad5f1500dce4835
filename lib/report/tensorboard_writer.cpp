#include "wantrain/report/tensorboard_writer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tensorboard.pb.h"
#include "wantrain/report/tfrecord.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/process.hpp"

namespace wt::report {
namespace fs = std::filesystem;
namespace tb = wantrain::tensorboard;

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string serialized(const tb::Event& event) {
  std::string out;
  if (!event.SerializeToString(&out)) throw Error("tensorboard: cannot serialize an event");
  return out;
}

// Keeps the events of `path` at steps <= `last_step` (and its file_version
// header); removes the file when nothing else is left, rewrites it when
// something was dropped. Returns a note when its tail was unreadable.
std::string cut_file(const std::string& path, int64_t last_step) {
  const RecordFile file = read_records(path);
  std::string kept;
  size_t events = 0;
  bool dropped = !file.problem.empty();
  for (const auto& record : file.records) {
    tb::Event event;
    if (!event.ParseFromString(record)) {  // not ours to judge: dropped with the rest after it
      dropped = true;
      break;
    }
    if (event.what_case() != tb::Event::kFileVersion && event.step() > last_step) {
      dropped = true;
      continue;
    }
    if (event.what_case() != tb::Event::kFileVersion) ++events;
    kept += frame_record(record);
  }
  std::error_code error;
  if (events == 0) {
    fs::remove(path, error);
    if (error) throw Error(fmt::format("tensorboard: cannot remove {}: {}", path, error.message()));
  } else if (dropped) {
    // The temporary is not named *tfevents*: a TensorBoard watching the
    // directory must not load it.
    write_file_durably(path, kept, (fs::path(path).parent_path() / ".cut-events.tmp").string());
  }
  return file.problem;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& directory, int64_t first_step) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw Error(fmt::format("tensorboard: cannot create {}: {}", directory, error.message()));
  std::vector<std::string> existing;
  for (const auto& entry : fs::directory_iterator(directory, error))
    if (entry.is_regular_file() && entry.path().filename().string().find("tfevents") != std::string::npos &&
        entry.path().extension() != ".tmp")
      existing.push_back(entry.path().string());
  for (const auto& old : existing)
    if (auto problem = cut_file(old, first_step); !problem.empty())
      notes_.push_back(problem + " (the rest of that file was dropped)");

  // TensorBoard orders a directory's files by name: the time comes first.
  const auto seconds = static_cast<long long>(wall_time());
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", directory, seconds, host_name(), getpid());
  for (int n = 1; fs::exists(path_); ++n)  // another writer of this process in the same second
    path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}.{}", directory, seconds, host_name(), getpid(), n);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error(fmt::format("tensorboard: cannot create {}: {}", path_, std::strerror(errno)));

  tb::Event version;
  version.set_wall_time(wall_time());
  version.set_file_version("brain.Event:2");
  write_event(serialized(version));
  // Whatever a reader loaded from an older file at these steps is stale.
  tb::Event start;
  start.set_wall_time(wall_time());
  start.set_step(first_step + 1);
  start.mutable_session_log()->set_status(tb::SessionLog::START);
  write_event(serialized(start));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<Scalar>& values) {
  tb::Event event;
  event.set_wall_time(wall_time());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& scalar : values) {
    auto* value = summary->add_value();
    value->set_tag(scalar.tag);
    value->set_simple_value(static_cast<float>(scalar.value));
  }
  write_event(serialized(event));
}

void TensorBoardWriter::image(int64_t step, const std::string& tag, const Image& image) {
  tb::Event event;
  event.set_wall_time(wall_time());
  event.set_step(step);
  auto* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  auto* encoded = value->mutable_image();
  encoded->set_width(image.width);
  encoded->set_height(image.height);
  encoded->set_colorspace(image.colorspace);
  encoded->set_encoded_image_string(image.png);
  write_event(serialized(event));
}

void TensorBoardWriter::write_event(const std::string& event) {
  const std::string record = frame_record(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw Error(fmt::format("tensorboard: cannot write {}: {}", path_, std::strerror(errno)));
}

}  // namespace wt::report
