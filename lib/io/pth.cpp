#include "wantrain/io/pth.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "torch.save data is read as little-endian");

namespace wt::io {
namespace {

// The file, open for reads at offsets, closed when done.
class File {
 public:
  explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  bool is_open() const { return fd_ >= 0; }

  // Fills `size` bytes at `target`; false on a short or failed read.
  bool read(uint64_t offset, uint64_t size, void* target) const {
    auto* out = static_cast<char*>(target);
    while (size > 0) {
      const ssize_t n = ::pread(fd_, out, size, off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      out += n;
      offset += uint64_t(n);
      size -= uint64_t(n);
    }
    return true;
  }

 private:
  int fd_;
};

}  // namespace

at::ScalarType scalar_type(PthDtype dtype) {
  switch (dtype) {
    case PthDtype::F32: return at::kFloat;
    case PthDtype::F64: return at::kDouble;
    case PthDtype::F16: return at::kHalf;
    case PthDtype::BF16: return at::kBFloat16;
    case PthDtype::I64: return at::kLong;
    case PthDtype::I32: return at::kInt;
    case PthDtype::I16: return at::kShort;
    case PthDtype::I8: return at::kChar;
    case PthDtype::U8: return at::kByte;
    case PthDtype::Bool: return at::kBool;
  }
  return at::kFloat;
}

PthFile PthFile::open(const std::string& path) {
  if (const auto why = unreadable_file_reason(path); !why.empty()) throw UsageError(fmt::format("{}: {}", path, why));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw UsageError(fmt::format("{}: cannot read the file ({})", path, ec.message()));
  const File file(path);
  if (!file.is_open()) throw UsageError(fmt::format("{}: cannot open the file: {}", path, std::strerror(errno)));
  PthFile out;
  out.path_ = path;
  out.entries_ = read_pth_index(path, size, [&](uint64_t offset, uint64_t bytes) {
    std::string data(bytes, '\0');
    if (!file.read(offset, bytes, data.data()))
      throw UsageError(fmt::format("{}: cannot read {} bytes at {} (truncated?)", path, bytes, offset));
    return data;
  });
  return out;
}

const PthTensor* PthFile::find(const std::string& name) const {
  for (const auto& entry : entries_)
    if (entry.name == name) return &entry;
  return nullptr;
}

at::Tensor PthFile::read(const PthTensor& entry) const {
  const uint64_t esize = pth_dtype_size(entry.dtype);
  const uint64_t first = uint64_t(entry.storage_offset) * esize;
  const uint64_t extent = entry.extent_bytes();
  // Only the elements the tensor reaches: from its offset to its last one.
  auto span = torch::empty({int64_t((extent - std::min(extent, first)) / esize)},
                           torch::TensorOptions().dtype(scalar_type(entry.dtype)));
  const File file(path_);
  if (span.numel() > 0 && (!file.is_open() || !file.read(entry.data_offset + first, extent - first, span.data_ptr())))
    throw Error(fmt::format("{}: cannot read tensor '{}' (file changed or truncated?)", path_, entry.name));
  return span.as_strided(entry.shape, entry.stride, 0).contiguous();
}

}  // namespace wt::io
