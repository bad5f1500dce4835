// Fault-injection points for the fault tests (tests/mpi, label `faults`).
// Unset, a delay point costs one environment lookup and a failure point
// (read once per process) a branch.
//
// WANTRAIN_TEST_DELAY=point:seconds[,point:seconds...] sleeps when the
// process reaches a named point, which opens a window wide enough for a test
// to hit deterministically (a slow checkpoint write, a signal before the
// first step):
//   checkpoint_write    rank 0's writer thread, before each checkpoint file
//   snapshot_copy       the Engine's CPU snapshot thread, before its copies
//   before_first_step   every rank, as train::fit starts
//   after_fit           every rank, after train::fit returned
//   after_run           wantrain's main, after the run and its signal
//                       handlers, before the process exits
//   encode_item         wandata encode, before each item is encoded (a kill
//                       mid-run for the resume test)
//   nccl_join           a rank about to join the NCCL communicator (the
//                       join deadline's GPU test delays one rank past it)
//
// WANTRAIN_TEST_FAIL=point:N makes the N-th call of test_failure(point)
// throw Error, where the real failure would (set it for one rank only, e.g.
// through the launcher's MPMD syntax):
//   sample_read         the data reader, as if a read failed (EIO)
//   shard_write         a rank's ZeRO checkpoint shard, as if its write failed
#pragma once

#include <string_view>

namespace wt {

void test_delay(std::string_view point);
void test_failure(std::string_view point);

}  // namespace wt
