// Who this process is, for error lines and log prefixes.
#pragma once

#include <string>

namespace wt {

// This machine's host name.
std::string host_name();

// The process's place in the job, set by distributed::World once MPI is up
// and cleared at MPI_Finalize (util itself knows no MPI).
void set_process_rank(int rank, int size);
void clear_process_rank();
// Names the process's rank group in every line after the rank
// ("rank 2/4, low expert group on node1"): wantrain --experts.
void set_process_group(const std::string& group);

// "rank 1/8 on node03" while a rank is set, "node03" otherwise.
std::string process_label();

}  // namespace wt
