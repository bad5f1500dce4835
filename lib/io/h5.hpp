// Small RAII layer over the HDF5 C API, for lib/data and lib/ckpt.
//
// HDF5 here is not built thread-safe: every call into it must hold
// io::library_mutex(). The functions below do not take it: their callers
// hold it (io::Lock, or a std::unique_lock they release between tensors),
// around these and any direct call of the C API alike.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>
#include "wantrain/io/h5_check.hpp"

namespace wt::io {

std::mutex& library_mutex();
using Lock = std::lock_guard<std::mutex>;

// Owns one HDF5 identifier and closes it with the matching H5*close.
// Move-only; a move leaves the source empty.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), close_(other.close_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, -1);
      close_ = other.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset() noexcept {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  // Gives up ownership, for a close whose result matters (H5Fclose of a file written).
  hid_t release() noexcept { return std::exchange(id_, -1); }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// Closes a file being written whose write failed (ENOSPC, EIO), which the
// caller then deletes. Closing flushes HDF5's cached metadata; on the disk
// that just failed that fails too, and HDF5 1.10 then keeps a half-closed
// file that crashes the process in MPI_Finalize. So the file's descriptor is
// first pointed at an anonymous memory file, where the flush succeeds and
// goes nowhere. `file` is empty afterwards.
void discard_file(Handle& file);

// Turns off HDF5's own error-stack printing: wantrain reports errors itself.
void quiet_errors();

// Opening and creating; each throws wt::Error with HDF5's reason (via H5_CHECK).
Handle open_file(const std::string& path, bool writable = false);
Handle create_file(const std::string& path);  // truncates
// A dataset or group under `location`, which must lie in the same file and
// hold its data itself: wt::Error for an external link, a virtual dataset
// or external storage (a downloaded file must not make wantrain read others).
Handle open_dataset(hid_t location, const std::string& name);
Handle open_group(hid_t location, const std::string& name);
Handle dataset_type(hid_t dataset);
Handle dataset_space(hid_t dataset);
bool exists(hid_t location, const std::string& name);  // a link directly under location

std::vector<hsize_t> dims(hid_t dataset);

// Attributes on an object: strings (fixed or variable length) and integers.
bool has_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name);
long long read_int_attribute(hid_t object, const std::string& name);
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
void write_int_attribute(hid_t object, const std::string& name, long long value);
double read_double_attribute(hid_t object, const std::string& name);  // any numeric type
void write_double_attribute(hid_t object, const std::string& name, double value);

// The IEEE binary16 type as h5py writes float16 (HDF5 1.10 has no predefined one).
Handle float16_type();
bool is_float16(hid_t type);

// Selects rows [first, first+count) of the leading dimension of `space`.
void select_rows(hid_t space, hsize_t first, hsize_t count);

// A memory dataspace for `count` rows of `file_space`: the same rank and row
// shape. (A memory space of another rank makes HDF5 map chunked data
// element by element, some 50x slower.)
Handle rows_space(hid_t file_space, hsize_t count);

}  // namespace wt::io
