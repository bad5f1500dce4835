#include "wantrain/data/noise_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>

#include "wantrain/io/h5.hpp"
#include "wantrain/util/error.hpp"

namespace wt::data {

at::Tensor read_noise(const std::string& path, const std::vector<int64_t>& expected) {
  if (!std::filesystem::is_regular_file(path)) throw UsageError(fmt::format("noise file {}: no such file", path));
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  io::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file) throw UsageError(fmt::format("noise file {}: not a readable HDF5 file", path));
  if (!io::exists(file.get(), "noise")) throw UsageError(fmt::format("noise file {}: has no /noise dataset", path));
  io::Handle noise;
  try {
    noise = io::open_dataset(file.get(), "noise");
  } catch (const Error& e) {  // data in another file
    throw UsageError(fmt::format("noise file {}: {}", path, e.what()));
  }
  if (H5Tget_class(io::dataset_type(noise.get()).get()) != H5T_FLOAT)
    throw UsageError(fmt::format("noise file {}: /noise is not floating point", path));
  const auto dims = io::dims(noise.get());
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  if (shape != expected)
    throw UsageError(fmt::format("noise file {}: /noise is [{}], the sample needs [{}] (C, F, H, W latents)", path,
                                 fmt::join(shape, ", "), fmt::join(expected, ", ")));
  auto out = torch::empty(expected, torch::kFloat32);
  H5_CHECK(H5Dread(noise.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr<float>()));
  if (!torch::isfinite(out).all().item<bool>())
    throw UsageError(fmt::format("noise file {}: /noise holds a value that is not finite", path));
  return out;
}

}  // namespace wt::data
