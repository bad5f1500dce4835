// Samples on ranks of their own (wantrain --sample-ranks K): the weights
// that samples are drawn with travel from rank 0 of each training group (a
// source: the one model, or each of Wan2.2 A14B's experts) to rank 0 of the
// sample ranks, over a communicator of the whole job, while training goes
// on. The sample ranks say when they are idle; a source never waits for
// them at a sample step of its own: when they are still drawing, that
// sample is dropped (fit says so in one line), so training never stalls.
//
//   sample root                          source (a training group's rank 0)
//   ask(source, from_step)   --kReady-->  ready(step): asked, and step >= from_step?
//                            <--kHeader-- begin(step, count)
//   receive(...)             <--kTensor-- send(name, tensor), count times
//   ...                                   finish(status): kHeader "done"
//   finished(source, status) --kFinished--> waits (bounded) for the sample ranks
//
// A source that is asked sends at its first sample step at or after the
// step the sample ranks asked for (with two experts the later of the two
// groups' steps, so that both experts come from one step).
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wt::distributed {
class World;
}

namespace wt::train {

// A duplicate of the job's communicator for the hand-offs (collective over
// the whole job: built on every rank before the job splits into groups).
class SampleChannel {
 public:
  explicit SampleChannel(const distributed::World& job);
  ~SampleChannel();
  SampleChannel(const SampleChannel&) = delete;
  SampleChannel& operator=(const SampleChannel&) = delete;
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// A training group's rank 0.
class SampleSender {
 public:
  // `sample_root`: the job rank of the sample ranks' rank 0.
  SampleSender(const SampleChannel& channel, int sample_root);
  ~SampleSender();
  SampleSender(const SampleSender&) = delete;
  SampleSender& operator=(const SampleSender&) = delete;

  enum class Readiness {
    Busy,       // the sample ranks are still drawing: this sample is dropped
    NotWanted,  // they asked for a later step (the other expert group's): not this one
    Ready,
  };
  // Without waiting: may the weights of `step` be sent now?
  Readiness ready(int64_t step);
  // The same, waiting up to `bound` while they are busy (the run's last sample).
  Readiness wait_ready(int64_t step, std::chrono::milliseconds bound);
  // After Ready: the weights of `step`, `count` tensors, each then by
  // send(); `base` names the frozen weights they complete (a LoRA base's
  // checksum; "" none), which the sample ranks check against their own.
  void begin(int64_t step, int64_t count, const std::string& base);
  // Blocks until the sample root has the tensor (any dtype, on any device).
  void send(const std::string& name, const at::Tensor& tensor);
  // The training group is done with status `status` (sent once, also
  // without any sample). Returns whether the sample ranks finished within
  // `bound` (drawing what they were sent).
  bool finish(int status, std::chrono::milliseconds bound);

 private:
  MPI_Comm comm_;
  int root_;
  MPI_Request asked_ = MPI_REQUEST_NULL;  // the kReady receive, posted until finish()
  int64_t from_step_ = 0;
  bool have_ask_ = false, finished_ = false;
  void post_ask();
  bool test_ask();
};

// The sample ranks' rank 0.
class SampleReceiver {
 public:
  // `sources`: the job ranks of the training groups' rank 0s.
  SampleReceiver(const SampleChannel& channel, std::vector<int> sources);
  ~SampleReceiver();
  SampleReceiver(const SampleReceiver&) = delete;
  SampleReceiver& operator=(const SampleReceiver&) = delete;

  size_t sources() const { return sources_.size(); }
  // Tells source `source` the sample ranks are idle and want its weights of
  // a step >= `from_step`.
  void ask(size_t source, int64_t from_step);

  struct Arrival {
    size_t source = 0;
    bool done = false;
    int64_t step = 0;   // weights: their step
    int64_t count = 0;  // weights: tensors that follow
    int status = 0;     // done: the group's exit status
    std::string base;   // weights: the frozen base they complete (SampleSender::begin)
  };
  // Waits (without bound: a source that dies ends the job) for the next
  // header of any source.
  Arrival next();
  // After an Arrival with weights: receives its tensors, each into the CPU
  // tensor `into` returns for its name, dtype and shape (contiguous, of that
  // shape and dtype), then calls `arrived` with it.
  using Destination =
      std::function<at::Tensor(const std::string& name, at::ScalarType dtype, const std::vector<int64_t>& shape)>;
  void receive(const Arrival& arrival, const Destination& into,
               const std::function<void(const std::string& name, const at::Tensor& tensor)>& arrived);
  // Tells a source that sent "done" that the sample ranks have finished.
  void finished(size_t source, int status);

 private:
  MPI_Comm comm_;
  std::vector<int> sources_;
  std::vector<MPI_Request> asks_;  // the kReady sends in flight
  std::vector<int64_t> ask_values_;
};

}  // namespace wt::train
