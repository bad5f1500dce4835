#include "wantrain/nn/tensor_memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <atomic>

namespace wt::nn {
namespace {

std::atomic<int64_t> live{0}, peak{0};

// Each allocation is the default allocator's, one alignment unit longer: the size
// sits in front of the data, which keeps the default's alignment. Data and
// context are one pointer, as raw_allocate() (which some kernels use)
// requires.
constexpr size_t kHeader = c10::gAlignment;  // keeps the default allocator's alignment
c10::Allocator* base = nullptr;

void release(void* data) {
  auto* start = static_cast<char*>(data) - kHeader;
  live.fetch_sub(*reinterpret_cast<int64_t*>(start));
  base->raw_deallocate(start);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    auto* start = static_cast<char*>(base->raw_allocate(bytes + kHeader));
    *reinterpret_cast<int64_t*>(start) = int64_t(bytes);
    const int64_t now = live.fetch_add(int64_t(bytes)) + int64_t(bytes);
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    void* data = start + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

void count_tensor_memory() {
  static CountingAllocator* const installed = [] {
    base = c10::GetCPUAllocator();
    auto* allocator = new CountingAllocator;  // lives as long as the process, as LibTorch's own
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    return allocator;
  }();
  (void)installed;
}

int64_t live_tensor_bytes() { return live.load(); }
int64_t peak_tensor_bytes() { return peak.load(); }
void reset_peak_tensor_bytes() { peak.store(live.load()); }

}  // namespace wt::nn
