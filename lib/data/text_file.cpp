#include "wantrain/data/text_file.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "wantrain/io/h5.hpp"
#include "wantrain/util/error.hpp"

namespace wt::data {

TextCondition read_text_condition(const std::string& path, int64_t index) {
  if (!std::filesystem::is_regular_file(path)) throw UsageError(fmt::format("text file {}: no such file", path));
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  io::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file) throw UsageError(fmt::format("text file {}: not a readable HDF5 file", path));
  if (!io::exists(file.get(), "text_emb"))
    throw UsageError(fmt::format("text file {}: has no /text_emb dataset", path));
  // Data in another file is the file's fault: one line naming it.
  auto open = [&](const char* name) {
    try {
      return io::open_dataset(file.get(), name);
    } catch (const Error& e) {
      throw UsageError(fmt::format("text file {}: {}", path, e.what()));
    }
  };
  const io::Handle emb = open("text_emb");
  auto dims = io::dims(emb.get());
  const bool batched = dims.size() == 3;  // [N, L, D]; else one [L, D]
  if (dims.size() == 2) dims.insert(dims.begin(), 1);
  if (dims.size() != 3)
    throw UsageError(
        fmt::format("text file {}: /text_emb must be [N, L, D] or [L, D], has {} dimensions", path, dims.size()));
  const int64_t n = int64_t(dims[0]), len = int64_t(dims[1]), width = int64_t(dims[2]);
  if (index < 0 || index >= n)
    throw UsageError(fmt::format("text file {}: index {} is outside its {} embeddings", path, index, n));

  TextCondition text;
  text.embedding = torch::zeros({len, width});  // [L, D]
  const io::Handle space = io::dataset_space(emb.get());
  if (batched) io::select_rows(space.get(), hsize_t(index), 1);
  const hsize_t mem_dims[2] = {hsize_t(len), hsize_t(width)};
  const io::Handle memory(H5Screate_simple(2, mem_dims, nullptr), H5Sclose);
  H5_CHECK(
      H5Dread(emb.get(), H5T_NATIVE_FLOAT, memory.get(), space.get(), H5P_DEFAULT, text.embedding.data_ptr<float>()));

  text.length = int32_t(len);
  if (io::exists(file.get(), "text_len")) {
    const io::Handle lengths = open("text_len");
    if (io::dims(lengths.get()) != std::vector<hsize_t>{hsize_t(n)})
      throw UsageError(fmt::format("text file {}: /text_len must be [{}] to match /text_emb", path, n));
    std::vector<int32_t> all(static_cast<size_t>(n));
    H5_CHECK(H5Dread(lengths.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()));
    text.length = all[static_cast<size_t>(index)];
    if (text.length < 0 || text.length > len)
      throw UsageError(fmt::format("text file {}: text_len[{}] = {} is outside 0..{}", path, index, text.length, len));
  }
  text.embedding.slice(0, text.length).zero_();
  return text;
}

}  // namespace wt::data
