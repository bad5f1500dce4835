#include "wantrain/io/h5.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include "wantrain/util/error.hpp"

namespace wt::io {

namespace {
constexpr const char* kOwnDataOnly = "wantrain reads only the data a file holds itself";
}  // namespace

std::mutex& library_mutex() {
  static std::mutex mutex;  // the HDF5 library itself is process-global
  return mutex;
}

void quiet_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void discard_file(Handle& file) {
  if (!file) return;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) >= 0 && handle) {
    const int fd = *static_cast<int*>(handle);
    const int sink = static_cast<int>(syscall(SYS_memfd_create, "wantrain-discarded-file", 0));
    if (sink >= 0) {
      dup2(sink, fd);
      close(sink);
    }
  }
  H5Eclear2(H5E_DEFAULT);
  file.reset();
}

Handle open_file(const std::string& path, bool writable) {
  return Handle(H5_CHECK(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose);
}

Handle create_file(const std::string& path) {
  return Handle(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
}

namespace {

// The number HDF5 gives the file an object lies in.
unsigned long file_number(hid_t object) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  H5_CHECK(H5Oget_info3(object, &info, H5O_INFO_BASIC));
#else
  H5O_info_t info;
  H5_CHECK(H5Oget_info2(object, &info, H5O_INFO_BASIC));
#endif
  return info.fileno;
}

// An object reached by name from `location` must lie in the same file: an
// external link would make a downloaded file read another one.
void check_same_file(hid_t location, hid_t object, const std::string& name) {
  if (file_number(object) != file_number(location))
    throw Error(fmt::format("{}: an external link to another file ({})", name, kOwnDataOnly));  // a backstop
}

// HDF5's external-link callback: refuses to follow the link, before the
// other file is opened, and notes the file it named.
herr_t refuse_external_link(const char*, const char*, const char* file, const char*, unsigned*, hid_t,
                            void* named) noexcept {
  try {
    *static_cast<std::string*>(named) = file ? file : "?";
  } catch (...) {
  }
  return -1;
}

// `open` with link access settings (`access_class`: a dataset's or group's) that refuse external links.
Handle open_in_file(hid_t location, const std::string& name, hid_t access_class,
                    hid_t (*open)(hid_t, const char*, hid_t), Handle::Closer close) {
  std::string named;
  const Handle access(H5_CHECK(H5Pcreate(access_class)), H5Pclose);
  H5_CHECK(H5Pset_elink_cb(access.get(), refuse_external_link, &named));
  const hid_t id = open(location, name.c_str(), access.get());
  if (id < 0 && !named.empty()) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(fmt::format("{}: an external link to another file, {} ({})", name, named, kOwnDataOnly));
  }
  Handle object(H5_CHECK(id), close);
  check_same_file(location, object.get(), name);  // whatever way led out of the file
  return object;
}

}  // namespace

Handle open_dataset(hid_t location, const std::string& name) {
  Handle dataset = open_in_file(location, name, H5P_DATASET_ACCESS, H5Dopen2, H5Dclose);
  const Handle create(H5_CHECK(H5Dget_create_plist(dataset.get())), H5Pclose);
  if (H5Pget_layout(create.get()) == H5D_VIRTUAL)
    throw Error(fmt::format("{}: a virtual dataset, its data drawn from other datasets ({})", name, kOwnDataOnly));
  if (H5Pget_external_count(create.get()) > 0)
    throw Error(fmt::format("{}: its data stored in external files ({})", name, kOwnDataOnly));
  return dataset;
}

Handle open_group(hid_t location, const std::string& name) {
  return open_in_file(location, name, H5P_GROUP_ACCESS, H5Gopen2, H5Gclose);
}

Handle dataset_type(hid_t dataset) { return Handle(H5_CHECK(H5Dget_type(dataset)), H5Tclose); }
Handle dataset_space(hid_t dataset) { return Handle(H5_CHECK(H5Dget_space(dataset)), H5Sclose); }

bool exists(hid_t location, const std::string& name) { return H5Lexists(location, name.c_str(), H5P_DEFAULT) > 0; }

std::vector<hsize_t> dims(hid_t dataset) {
  const Handle space = dataset_space(dataset);
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> out(rank);
  H5_CHECK(H5Sget_simple_extent_dims(space.get(), out.data(), nullptr));
  return out;
}

bool has_attribute(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

std::string read_string_attribute(hid_t object, const std::string& name) {
  const Handle attr(H5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT)), H5Aclose);
  const Handle type(H5_CHECK(H5Aget_type(attr.get())), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) throw Error("attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    // As h5py writes a Python str.
    const Handle mem(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    H5_CHECK(H5Tset_size(mem.get(), H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(mem.get(), H5Tget_cset(type.get())));
    char* text = nullptr;
    H5_CHECK(H5Aread(attr.get(), mem.get(), &text));
    std::string value = text ? text : "";
    const Handle space(H5_CHECK(H5Aget_space(attr.get())), H5Sclose);
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &text);
    return value;
  }
  const size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  H5_CHECK(H5Aread(attr.get(), type.get(), value.data()));
  return value.substr(0, value.find('\0'));
}

long long read_int_attribute(hid_t object, const std::string& name) {
  const Handle attr(H5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT)), H5Aclose);
  const Handle type(H5_CHECK(H5Aget_type(attr.get())), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) throw Error("attribute '" + name + "' is not an integer");
  long long value = 0;
  H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_LLONG, &value));
  return value;
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  const Handle type(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  const Handle space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  const Handle attr(H5_CHECK(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)),
                    H5Aclose);
  const char* text = value.c_str();
  H5_CHECK(H5Awrite(attr.get(), type.get(), &text));
}

void write_int_attribute(hid_t object, const std::string& name, long long value) {
  const Handle space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  const Handle attr(H5_CHECK(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
                    H5Aclose);
  H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_LLONG, &value));
}

double read_double_attribute(hid_t object, const std::string& name) {
  const Handle attr(H5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT)), H5Aclose);
  const Handle type(H5_CHECK(H5Aget_type(attr.get())), H5Tclose);
  const auto type_class = H5Tget_class(type.get());
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) throw Error("attribute '" + name + "' is not a number");
  double value = 0;
  H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value));
  return value;
}

void write_double_attribute(hid_t object, const std::string& name, double value) {
  const Handle space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  const Handle attr(H5_CHECK(H5Acreate2(object, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
                    H5Aclose);
  H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value));
}

Handle float16_type() {
  Handle type(H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)), H5Tclose);
  // sign bit 15, exponent bits 10..14, mantissa bits 0..9, bias 15
  H5_CHECK(H5Tset_fields(type.get(), 15, 10, 5, 0, 10));
  H5_CHECK(H5Tset_size(type.get(), 2));
  H5_CHECK(H5Tset_ebias(type.get(), 15));
  return type;
}

bool is_float16(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  H5_CHECK(H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize));
  return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type) == 15 &&
         H5Tget_order(type) == H5T_ORDER_LE;
}

void select_rows(hid_t space, hsize_t first, hsize_t count) {
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(rank), start(rank, 0), counts(rank);
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  counts = dims;
  start[0] = first;
  counts[0] = count;
  H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr));
}

Handle rows_space(hid_t file_space, hsize_t count) {
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(file_space));
  std::vector<hsize_t> dims(rank);
  H5_CHECK(H5Sget_simple_extent_dims(file_space, dims.data(), nullptr));
  dims[0] = count;
  return Handle(H5_CHECK(H5Screate_simple(rank, dims.data(), nullptr)), H5Sclose);
}

}  // namespace wt::io
