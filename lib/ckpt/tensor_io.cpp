#include "wantrain/ckpt/tensor_io.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>

#include "wantrain/util/error.hpp"

namespace wt::ckpt {

void write_file(const std::string& path, const std::string& what,
                const std::function<void(hid_t file, const std::function<void()>& between_tensors)>& write) {
  std::unique_lock<std::mutex> lock(io::library_mutex());
  io::quiet_errors();
  io::Handle file;
  // The handles are closed under the lock, also when unwinding.
  const std::function<void()> between_tensors = [&] {
    lock.unlock();
    lock.lock();
  };
  try {
    file = io::create_file(path);
    write(file.get(), between_tensors);
    H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL));
    // The last data reach the file here: its failure is a failed write, and
    // the file is still ours to discard.
    H5_CHECK(H5Fclose(file.get()));
    file.release();
  } catch (const std::exception& e) {
    if (!lock.owns_lock()) lock.lock();
    io::discard_file(file);
    throw Error(fmt::format("{} {}: cannot write: {}", what, path, e.what()));
  }
}

// One float32 tensor as a dataset of its shape (a scalar dataspace for 0-d).
void write_tensor(hid_t location, const std::string& name, const at::Tensor& tensor) {
  const auto data = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const std::vector<hsize_t> dims(data.sizes().begin(), data.sizes().end());
  const io::Handle space(
      H5_CHECK(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr)),
      H5Sclose);
  const io::Handle set(
      H5_CHECK(H5Dcreate2(location, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
      H5Dclose);
  H5_CHECK(H5Dwrite(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data_ptr()));
}

// A float32 dataset (any stored float type is converted by HDF5).
at::Tensor read_tensor(hid_t location, const std::string& name) {
  const auto set = io::open_dataset(location, name);
  const auto type = io::dataset_type(set.get());
  if (H5Tget_class(type.get()) != H5T_FLOAT) throw Error("not a floating-point dataset");
  const auto dims = io::dims(set.get());
  const std::vector<int64_t> sizes(dims.begin(), dims.end());
  auto out = torch::empty(sizes, torch::kFloat32);
  H5_CHECK(H5Dread(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()));
  return out;
}

at::Tensor read_rows_covering(hid_t location, const std::string& name, int64_t begin, int64_t end, int64_t& first) {
  const auto set = io::open_dataset(location, name);
  const auto type = io::dataset_type(set.get());
  if (H5Tget_class(type.get()) != H5T_FLOAT) throw Error("not a floating-point dataset");
  const auto dims = io::dims(set.get());
  if (dims.empty()) {  // a scalar: its one element
    first = 0;
    return read_tensor(location, name).reshape({1});
  }
  int64_t row = 1;
  for (size_t d = 1; d < dims.size(); ++d) row *= int64_t(dims[d]);
  const int64_t first_row = begin / std::max<int64_t>(row, 1);
  const int64_t rows = row == 0 ? 0 : (end + row - 1) / row - first_row;
  first = first_row * row;
  auto out = torch::empty({rows * row}, torch::kFloat32);
  if (rows == 0) return out;
  const auto file_space = io::dataset_space(set.get());
  io::select_rows(file_space.get(), hsize_t(first_row), hsize_t(rows));
  const auto memory_space = io::rows_space(file_space.get(), hsize_t(rows));
  H5_CHECK(H5Dread(set.get(), H5T_NATIVE_FLOAT, memory_space.get(), file_space.get(), H5P_DEFAULT, out.data_ptr()));
  return out;
}

io::Handle create_group(hid_t location, const std::string& name) {
  return io::Handle(H5_CHECK(H5Gcreate2(location, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
}

namespace {

// Appends each name an HDF5 iteration (links or attributes) visits to a
// vector; nothing may unwind through HDF5's C frames.
template <class Info>
herr_t collect_name(hid_t, const char* name, const Info*, void* out) noexcept {
  try {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // namespace

std::vector<std::string> members(hid_t group) {
  std::vector<std::string> names;
  H5_CHECK(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name<H5L_info_t>, &names));
  return names;
}

std::vector<std::string> attribute_names(hid_t object) {
  std::vector<std::string> names;
  H5_CHECK(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name<H5A_info_t>, &names));
  return names;
}

}  // namespace wt::ckpt
