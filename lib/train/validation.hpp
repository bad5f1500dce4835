// Validation: an objective's validation metric over a held-out set.
// The objective makes the metric deterministic (flow matching: a fixed sigma
// grid with noise keyed by sample; wan/objective/flow_matching_objective.hpp). Rank r
// of W scores samples r, r+W, ... of each group (a dataset's bucket: its
// samples share a shape and so a batch); the per-group sums are
// all-reduced, so the result equals the 1-rank value on any world size
// (ranks with one sample fewer simply do less work: one collective, no hang).
#pragma once

#include <c10/core/ScalarType.h>

#include <memory>
#include <string>
#include <vector>

#include "wantrain/train/sample_source.hpp"

namespace wt::distributed {
class Comm;
}

namespace wt::train {

class Objective;

struct ValidationResult {
  double loss = 0;  // the mean over every sample (each group weighted by its samples)
  struct Group {
    std::string name;
    int64_t samples = 0;
    double loss = 0;  // the mean over the group's samples
  };
  std::vector<Group> groups;  // one per bucket, only when there are several
};

class Validator {
 public:
  // Scores `batch_size` samples of `samples` at a time.
  Validator(std::unique_ptr<SampleSource> samples, int batch_size);
  ~Validator();

  const SampleSource& samples() const { return *samples_; }

  // The mean of the objective's per-sample metric, overall and per group,
  // on all ranks. Collective; without gradients, under `compute_dtype`
  // autocast.
  // With sequence_parallel > 1 the consecutive ranks of each group
  // evaluate the same samples together (the model's sequence parallelism),
  // and the group's first rank counts them.
  ValidationResult evaluate(Objective& objective, distributed::Comm& comm, at::ScalarType compute_dtype,
                            int sequence_parallel = 1);

 private:
  std::unique_ptr<SampleSource> samples_;
  std::vector<SampleGroup> groups_;
  int batch_size_;
};

}  // namespace wt::train
