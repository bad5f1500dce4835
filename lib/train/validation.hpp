// Validation: an objective's validation metric over a held-out dataset.
// The objective makes the metric deterministic (flow matching: a fixed sigma
// grid with noise keyed by sample; train/flow_matching_objective.hpp). Rank r
// of W scores samples r, r+W, ...; the sums are all-reduced, so the result
// equals the 1-rank value on any world size (ranks with one sample fewer
// simply do less work: one collective, no hang).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "wantrain/data/dataset.hpp"

namespace wt::distributed {
class Comm;
}

namespace wt::train {

class Objective;

class Validator {
 public:
  // Opens `directory` (UsageError naming it when it is not a dataset);
  // scores `batch_size` samples at a time.
  Validator(const std::string& directory, int batch_size);
  ~Validator();

  const data::Dataset& dataset() const { return dataset_; }

  // The mean of the objective's per-sample metric over every sample, on all
  // ranks. Collective; without gradients, under `compute_dtype` autocast.
  double evaluate(Objective& objective, distributed::Comm& comm, at::ScalarType compute_dtype);

 private:
  data::Dataset dataset_;
  int batch_size_;
};

}  // namespace wt::train
