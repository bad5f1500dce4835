#include "wantrain/wan/plan/decode_memory.hpp"

namespace wt::wan {

double vae_decode_bytes(VaeVersion version, at::ScalarType dtype, int64_t width, int64_t height) {
  const double per_pixel = (version == VaeVersion::Wan22 ? 17.6 : 22.4) * 1024.0;  // fp32
  return per_pixel * double(width) * double(height) * (dtype == at::kFloat ? 1.0 : 0.5);
}

}  // namespace wt::wan
