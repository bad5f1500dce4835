// Validation loss: the flow-matching loss on a held-out dataset, made
// comparable across steps and runs by fixing what training draws at random.
// Every sample is scored at each sigma of a fixed grid, shifted as training
// shifts it: sigma_j = shift_sigma((j + 0.5) / G), with noise from a generator
// keyed by (sample, j) alone. Rank r of W scores samples r, r+W, ...; the sums
// are all-reduced, so the result equals the 1-rank value on any world size
// (ranks with one sample fewer simply do less work: one collective, no hang).
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.hpp"

namespace wt {
class Comm;
}
namespace wt::model {
class WanModelImpl;
}

namespace wt::train {

struct ValidationOptions {
  int batch_size = 1;
  int grid = 4;  // sigmas per sample
  double shift = 5.0;
};

class Validator {
 public:
  // Opens `directory` (UsageError naming it when it is not a dataset).
  Validator(const std::string& directory, ValidationOptions options);
  ~Validator();

  const data::Dataset& dataset() const { return dataset_; }

  // The mean per-sample loss over every sample and grid sigma, on all ranks.
  // Collective; runs the model in eval mode without gradients.
  double evaluate(model::WanModelImpl& model, Comm& comm, at::ScalarType compute_dtype);

 private:
  data::Dataset dataset_;
  ValidationOptions options_;
};

}  // namespace wt::train
