#include "wantrain/util/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace wt {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

double current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  double size = 0, resident = 0;  // in pages
  statm >> size >> resident;
  return resident * double(sysconf(_SC_PAGESIZE));
}

double physical_memory_bytes() { return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)); }

}  // namespace wt
