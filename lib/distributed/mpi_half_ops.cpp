#include "wantrain/distributed/mpi_half_ops.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "wantrain/util/avx2_clones.hpp"
#if WANTRAIN_X86_CLONES
#include <immintrin.h>
#endif

#include "wantrain/util/error.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt::distributed {

namespace {

struct Add {
  float operator()(float a, float b) const { return a + b; }
};
// NaN wins, as in LibTorch's maximum/minimum.
struct Max {
  float operator()(float a, float b) const { return std::isnan(a) || a > b ? a : b; }
};
struct Min {
  float operator()(float a, float b) const { return std::isnan(a) || a < b ? a : b; }
};

template <class Half, class Combine>
void combine(void* in, void* inout, int* length, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  const Combine f;
  for (int i = 0; i < *length; ++i) b[i] = Half(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

// The sums, the hot path of 16-bit gradient reduction, written so that the
// compiler vectorises them: the same arithmetic as c10's conversions (widen,
// add in fp32, round to nearest even once) without their per-element branches.
float widen_bf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

WANTRAIN_AVX2_CLONES void add_bf16(const uint16_t* a, uint16_t* b, int n) {
  for (int i = 0; i < n; ++i) {
    const float sum = widen_bf16(a[i]) + widen_bf16(b[i]);
    uint32_t u;
    std::memcpy(&u, &sum, sizeof u);
    const uint16_t rounded = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    b[i] = sum != sum ? uint16_t(0x7fc0) : rounded;  // NaN stays a quiet NaN, as c10 makes it
  }
}

void sum_bf16(void* in, void* inout, int* length, MPI_Datatype*) {
  add_bf16(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *length);
}

#if WANTRAIN_X86_CLONES
// F16C converts 8 halves at a time with IEEE rounding; c10::Half finishes
// the tail (and every element on a CPU without F16C).
__attribute__((target("avx2,f16c"))) int add_f16_f16c(const uint16_t* a, uint16_t* b, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif

void sum_f16(void* in, void* inout, int* length, MPI_Datatype* type) {
  int done = 0;
#if WANTRAIN_X86_CLONES
  static const bool f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (f16c) done = add_f16_f16c(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *length);
#endif
  int rest = *length - done;
  combine<c10::Half, Add>(static_cast<c10::Half*>(in) + done, static_cast<c10::Half*>(inout) + done, &rest, type);
}

template <class Half>
MPI_User_function* pick(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return std::is_same_v<Half, c10::BFloat16> ? &sum_bf16 : &sum_f16;
    case ReduceOp::Max: return &combine<Half, Max>;
    case ReduceOp::Min: return &combine<Half, Min>;
  }
  throw Error("unknown ReduceOp");
}

int dtype_slot(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return 0;
  if (dtype == at::kHalf) return 1;
  throw Error(std::string("half-precision MPI reduction asked for ") + c10::toString(dtype));
}

int op_slot(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return 0;
    case ReduceOp::Max: return 1;
    case ReduceOp::Min: return 2;
  }
  throw Error("unknown ReduceOp");
}

constexpr ReduceOp kSlotOps[3] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

}  // namespace

MPI_User_function* half_reduce_function(at::ScalarType dtype, ReduceOp op) {
  return dtype_slot(dtype) == 0 ? pick<c10::BFloat16>(op) : pick<c10::Half>(op);
}

HalfReduceOps::HalfReduceOps() {
  const at::ScalarType dtypes[2] = {at::kBFloat16, at::kHalf};
  for (int d = 0; d < 2; ++d)
    for (int o = 0; o < 3; ++o)
      MPI_CHECK(MPI_Op_create(half_reduce_function(dtypes[d], kSlotOps[o]), /*commute=*/1, &ops_[d][o]));
}

HalfReduceOps::~HalfReduceOps() {
  for (auto& row : ops_)
    for (auto& op : row) MPI_Op_free(&op);
}

MPI_Op HalfReduceOps::get(at::ScalarType dtype, ReduceOp op) const { return ops_[dtype_slot(dtype)][op_slot(op)]; }

}  // namespace wt::distributed
