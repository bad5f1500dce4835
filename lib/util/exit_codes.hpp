// Exit status of every wantrain tool (documented in docs/cluster.md).
#pragma once

namespace wt {

inline constexpr int kExitOk = 0;
// Runtime failure: I/O, a collective failed or timed out, a rank died.
inline constexpr int kExitFailure = 1;
// Usage or configuration error found before any work started.
inline constexpr int kExitUsage = 2;
// A pre-emption signal arrived, a checkpoint was written: requeue the job
// (75 is EX_TEMPFAIL of sysexits.h, "try again later").
inline constexpr int kExitRequeue = 75;

}  // namespace wt
