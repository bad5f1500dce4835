#include "wantrain/train/sample_handoff.hpp"

#include <c10/core/ScalarType.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <climits>
#include <sstream>

#include "wantrain/distributed/mpi_check.hpp"
#include "wantrain/distributed/poll_request.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/poll.hpp"

namespace wt::train {
namespace {

enum Tag : int { kReady = 1, kHeader = 2, kTensor = 3, kTensorData = 4, kFinished = 5, kBase = 6 };
enum Kind : int64_t { kWeights = 0, kDone = 1 };

// Messages of at most 1 GiB (MPI counts are ints).
constexpr int64_t kPiece = int64_t(1) << 30;

std::string describe(const std::string& name, const at::Tensor& tensor) {
  std::string text = fmt::format("{}\t{}\t", name, int(tensor.scalar_type()));
  for (int64_t d = 0; d < tensor.dim(); ++d) text += fmt::format("{}{}", d ? "," : "", tensor.size(d));
  return text;
}

struct Description {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
};

Description parse(const std::string& text) {
  Description d;
  std::istringstream in(text);
  std::string dtype, shape;
  if (!std::getline(in, d.name, '\t') || !std::getline(in, dtype, '\t'))
    throw Error("sample hand-off: a malformed tensor description: " + text);
  std::getline(in, shape);
  d.dtype = at::ScalarType(std::stoi(dtype));
  std::istringstream dims(shape);
  for (std::string dim; std::getline(dims, dim, ',');) d.shape.push_back(std::stoll(dim));
  return d;
}

void send_bytes(const void* data, int64_t bytes, int to, MPI_Comm comm) {
  const auto* p = static_cast<const char*>(data);
  for (int64_t at = 0; at < bytes; at += kPiece)
    MPI_CHECK(MPI_Send(p + at, int(std::min(kPiece, bytes - at)), MPI_BYTE, to, kTensorData, comm));
}

void receive_bytes(void* data, int64_t bytes, int from, MPI_Comm comm) {
  auto* p = static_cast<char*>(data);
  for (int64_t at = 0; at < bytes; at += kPiece)
    MPI_CHECK(
        MPI_Recv(p + at, int(std::min(kPiece, bytes - at)), MPI_BYTE, from, kTensorData, comm, MPI_STATUS_IGNORE));
}

// Waits, sleeping between polls (the sample ranks wait here for hours,
// beside training ranks), for a message with `tag` from `from`.
MPI_Status probe(int from, int tag, MPI_Comm comm) {
  MPI_Status status{};
  poll_until(
      [&] {
        int arrived = 0;
        MPI_CHECK(MPI_Iprobe(from, tag, comm, &arrived, &status));
        return arrived != 0;
      },
      distributed::kUnbounded);
  return status;
}

}  // namespace

SampleChannel::SampleChannel(const distributed::World& job) { MPI_CHECK(MPI_Comm_dup(job.comm(), &comm_)); }

SampleChannel::~SampleChannel() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

SampleSender::SampleSender(const SampleChannel& channel, int sample_root) : comm_(channel.comm()), root_(sample_root) {
  post_ask();
}

SampleSender::~SampleSender() {
  if (asked_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&asked_);
    MPI_Wait(&asked_, MPI_STATUS_IGNORE);
  }
}

void SampleSender::post_ask() {
  have_ask_ = false;
  MPI_CHECK(MPI_Irecv(&from_step_, 1, MPI_INT64_T, root_, kReady, comm_, &asked_));
}

bool SampleSender::test_ask() {
  if (have_ask_) return true;
  int arrived = 0;
  MPI_CHECK(MPI_Test(&asked_, &arrived, MPI_STATUS_IGNORE));
  have_ask_ = arrived != 0;
  return have_ask_;
}

SampleSender::Readiness SampleSender::ready(int64_t step) {
  if (!test_ask()) return Readiness::Busy;
  return step >= from_step_ ? Readiness::Ready : Readiness::NotWanted;
}

SampleSender::Readiness SampleSender::wait_ready(int64_t step, std::chrono::milliseconds bound) {
  poll_until([&] { return test_ask(); }, bound);
  return ready(step);
}

void SampleSender::begin(int64_t step, int64_t count, const std::string& base) {
  if (!have_ask_) throw Error("sample hand-off: weights sent without being asked for");
  post_ask();  // the next ask may come while these are received
  const std::array<int64_t, 4> header{kWeights, step, count, 0};
  MPI_CHECK(MPI_Send(header.data(), 4, MPI_INT64_T, root_, kHeader, comm_));
  MPI_CHECK(MPI_Send(base.data(), int(base.size()), MPI_CHAR, root_, kBase, comm_));
}

void SampleSender::send(const std::string& name, const at::Tensor& tensor) {
  const auto cpu = tensor.detach().to(at::kCPU).contiguous();
  const auto text = describe(name, cpu);
  MPI_CHECK(MPI_Send(text.data(), int(text.size()), MPI_CHAR, root_, kTensor, comm_));
  send_bytes(cpu.data_ptr(), int64_t(cpu.nbytes()), root_, comm_);
}

bool SampleSender::finish(int status, std::chrono::milliseconds bound) {
  if (finished_) return true;
  finished_ = true;
  if (asked_ != MPI_REQUEST_NULL) {  // no more weights: an ask in flight goes unanswered
    MPI_Cancel(&asked_);
    MPI_Wait(&asked_, MPI_STATUS_IGNORE);
  }
  const std::array<int64_t, 4> header{kDone, 0, 0, status};
  MPI_CHECK(MPI_Send(header.data(), 4, MPI_INT64_T, root_, kHeader, comm_));
  int64_t their_status = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(&their_status, 1, MPI_INT64_T, root_, kFinished, comm_, &request));
  const bool done = distributed::poll_request(request, bound);
  if (!done) {
    MPI_Cancel(&request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  return done;
}

SampleReceiver::SampleReceiver(const SampleChannel& channel, std::vector<int> sources)
    : comm_(channel.comm()),
      sources_(std::move(sources)),
      asks_(sources_.size(), MPI_REQUEST_NULL),
      ask_values_(sources_.size(), 0) {}

SampleReceiver::~SampleReceiver() {
  for (auto& request : asks_)  // an ask no source took (it ended first): nothing waits for it
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
}

void SampleReceiver::ask(size_t source, int64_t from_step) {
  auto& request = asks_.at(source);
  if (request != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));  // 8 bytes: sent eagerly
  ask_values_[source] = from_step;
  MPI_CHECK(MPI_Isend(&ask_values_[source], 1, MPI_INT64_T, sources_[source], kReady, comm_, &request));
}

SampleReceiver::Arrival SampleReceiver::next() {
  const MPI_Status status = probe(MPI_ANY_SOURCE, kHeader, comm_);
  std::array<int64_t, 4> header{};
  MPI_CHECK(MPI_Recv(header.data(), 4, MPI_INT64_T, status.MPI_SOURCE, kHeader, comm_, MPI_STATUS_IGNORE));
  const auto it = std::find(sources_.begin(), sources_.end(), status.MPI_SOURCE);
  if (it == sources_.end())
    throw Error(fmt::format("sample hand-off: a header from job rank {}, which trains no model", status.MPI_SOURCE));
  Arrival arrival;
  arrival.source = size_t(it - sources_.begin());
  arrival.done = header[0] == kDone;
  arrival.step = header[1];
  arrival.count = header[2];
  arrival.status = int(header[3]);
  if (!arrival.done) {  // the base follows its header at once
    MPI_Status base{};
    MPI_CHECK(MPI_Probe(status.MPI_SOURCE, kBase, comm_, &base));
    int length = 0;
    MPI_CHECK(MPI_Get_count(&base, MPI_CHAR, &length));
    arrival.base.resize(size_t(length));
    MPI_CHECK(MPI_Recv(arrival.base.data(), length, MPI_CHAR, status.MPI_SOURCE, kBase, comm_, MPI_STATUS_IGNORE));
  }
  return arrival;
}

void SampleReceiver::receive(const Arrival& arrival, const Destination& into,
                             const std::function<void(const std::string&, const at::Tensor&)>& arrived) {
  const int from = sources_.at(arrival.source);
  for (int64_t i = 0; i < arrival.count; ++i) {
    const MPI_Status status = probe(from, kTensor, comm_);  // with ZeRO-3 each unit is gathered first
    int length = 0;
    MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &length));
    std::string text(size_t(length), '\0');
    MPI_CHECK(MPI_Recv(text.data(), length, MPI_CHAR, from, kTensor, comm_, MPI_STATUS_IGNORE));
    const auto d = parse(text);
    at::Tensor tensor = into(d.name, d.dtype, d.shape);
    TORCH_CHECK(tensor.is_contiguous() && tensor.device().is_cpu() && tensor.scalar_type() == d.dtype &&
                    tensor.sizes().vec() == d.shape,
                "sample hand-off: the destination of ", d.name, " is not a CPU tensor of its dtype and shape");
    receive_bytes(tensor.data_ptr(), int64_t(tensor.nbytes()), from, comm_);
    arrived(d.name, tensor);
  }
}

void SampleReceiver::finished(size_t source, int status) {
  const int64_t value = status;
  MPI_CHECK(MPI_Send(&value, 1, MPI_INT64_T, sources_.at(source), kFinished, comm_));
}

}  // namespace wt::train
