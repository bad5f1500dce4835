#include "wantrain/util/memory.hpp"

#include <sys/resource.h>

namespace wt {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace wt
