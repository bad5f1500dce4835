// Validation: an objective's validation metric over a held-out set.
// The objective makes the metric deterministic (flow matching: a fixed sigma
// grid with noise keyed by sample; wan/flow_matching_objective.hpp). Rank r
// of W scores samples r, r+W, ...; the sums are all-reduced, so the result
// equals the 1-rank value on any world size (ranks with one sample fewer
// simply do less work: one collective, no hang).
#pragma once

#include <c10/core/ScalarType.h>

#include <memory>

#include "wantrain/train/sample_source.hpp"

namespace wt::distributed {
class Comm;
}

namespace wt::train {

class Objective;

class Validator {
 public:
  // Scores `batch_size` samples of `samples` at a time.
  Validator(std::unique_ptr<SampleSource> samples, int batch_size);
  ~Validator();

  const SampleSource& samples() const { return *samples_; }

  // The mean of the objective's per-sample metric over every sample, on all
  // ranks. Collective; without gradients, under `compute_dtype` autocast.
  double evaluate(Objective& objective, distributed::Comm& comm, at::ScalarType compute_dtype);

 private:
  std::unique_ptr<SampleSource> samples_;
  int batch_size_;
};

}  // namespace wt::train
