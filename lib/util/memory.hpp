// How much memory this process has used, for run summaries and benchmarks.
#pragma once

namespace wt {

// The process's peak resident set size so far in MiB (getrusage's
// ru_maxrss): the most host memory it held at any moment, mapped files
// included.
double peak_rss_mib();

}  // namespace wt
