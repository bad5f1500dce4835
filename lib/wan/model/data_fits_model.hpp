// Whether a dataset's samples can train a model: checked on every rank
// before training starts, so a mismatch is one line, not a shape error deep
// inside the first forward pass.
#pragma once

#include <string>

namespace wt::data {
struct SampleShape;
class Dataset;
}  // namespace wt::data
namespace wt::wan {
struct WanConfig;
}

namespace wt::wan {

// UsageError naming the dataset, the model config and the field when the
// latent channels differ from in_dim or out_dim, the text width from
// text_dim, the text length exceeds text_len, or F, H, W are not multiples
// of patch_size.
void check_data_fits_model(const data::SampleShape& sample, const std::string& data_dir, const WanConfig& config,
                           const std::string& config_path);
// Every bucket of `dataset` (one of several is named in the error).
void check_data_fits_model(const data::Dataset& dataset, const WanConfig& config, const std::string& config_path);

}  // namespace wt::wan
