// How much memory this process uses and this host has, for run summaries,
// memory plans and benchmarks.
#pragma once

namespace wt {

// The process's peak resident set size so far in MiB (getrusage's
// ru_maxrss): the most host memory it held at any moment, mapped files
// included.
double peak_rss_mib();

// The process's resident set size now, in bytes (/proc/self/statm).
double current_rss_bytes();

// The host's physical memory in bytes.
double physical_memory_bytes();

}  // namespace wt
