#include "wantrain/distributed/world.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/util/process.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/cuda_libraries.hpp"
#include "wantrain/distributed/mpi_check.hpp"
#include "wantrain/distributed/poll_request.hpp"
#include "wantrain/distributed/roll_call.hpp"

namespace wt::distributed {

namespace {
const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}
// Open MPI 4.1 keeps a process's session files under
// ompi.<host>.<uid>/ in its temporary directory, every singleton under the
// same jf.0/ there: one that ends may remove jf.0 while another, started
// beside it on the node, creates its own files in it, and that one dies in
// MPI_Init ("A call to mkdir was unable to create the desired directory",
// open-mpi/ompi#8510; seen here when tests ran singletons side by side, as
// a user's shell loop of wansample runs would). A singleton gets a session
// tree of its own, removed at finalize (remove_singleton_session_dir: also
// on the paths that end the process without it); a launched rank (mpirun's,
// srun's) keeps its launcher's, and a value already set wins. Returns the
// directory made, or "".
std::string& singleton_session_dir() {
  static std::string path;  // once per process, as MPI is
  return path;
}

std::string own_singleton_session_dir() {
  for (const char* launched : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(launched)) return "";
  if (std::getenv("OMPI_MCA_orte_tmpdir_base")) return "";
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/wantrain-ompi-XXXXXX";
  if (!mkdtemp(pattern.data())) return "";  // Open MPI's own default then, as before
  setenv("OMPI_MCA_orte_tmpdir_base", pattern.c_str(), /*overwrite=*/1);
  return pattern;
}

}  // namespace

void remove_singleton_session_dir() noexcept {
  auto& path = singleton_session_dir();
  if (path.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
  path.clear();
}

World::World(int& argc, char**& argv) : host_(host_name()) {
  // A process started without a launcher (one rank: wandata, wansample, a
  // one-rank wantrain) is an MPI singleton; Open MPI then starts an orted
  // beside it, which costs every such start about 0.15 s (measured:
  // docs/development.md, "Scheduling") and serves nothing a singleton does
  // (no spawn, no second rank). Isolated, it starts none. Only Open MPI
  // reads the variable, only a singleton uses it, and a value already set
  // wins.
  setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  singleton_session_dir() = own_singleton_session_dir();
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    abort_job("MPI_Init_thread failed: is the MPI library installed and the launcher (mpirun/srun) working?", 1);
  if (provided < MPI_THREAD_MULTIPLE)
    abort_job(fmt::format("MPI granted {} but wantrain needs MPI_THREAD_MULTIPLE; use an MPI built with thread "
                          "support (Open MPI: --enable-mpi-thread-multiple)",
                          thread_level_name(provided)),
              1);
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  job_rank_ = rank_;
  job_size_ = size_;
  set_process_rank(rank_, size_);
  // LibTorch's CUDA backend where this machine can run it, before anything
  // asks LibTorch about CUDA (cuda_libraries.hpp).
  const auto& cuda = load_cuda_libraries();
  if (!cuda.setting.empty()) abort_job(cuda.why_not, kExitUsage);

  // The node-local rank comes from the processes sharing memory with us.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_CHECK(MPI_Comm_free(&node));
  // WANTRAIN_ROLL_CALL=0 leaves the responder thread out (its cost measured:
  // docs/performance.md); timeout lines then cannot say which ranks are gone.
  // Made on every rank either way: it is collective, and one rank's setting
  // must not decide whether the others wait in it.
  const char* roll_call = std::getenv("WANTRAIN_ROLL_CALL");
  const bool answer = roll_call == nullptr || std::string(roll_call) != "0";
  roll_call_ = std::make_unique<RollCall>(comm_, host_, answer);
  if (answer) set_roll_call(roll_call_.get());
}

World::World(GroupTag, const World& parent, MPI_Comm comm)
    : comm_(comm),
      local_rank_(parent.local_rank_),
      local_size_(parent.local_size_),
      job_rank_(parent.job_rank_),
      job_size_(parent.job_size_),
      group_(true),
      host_(parent.host_),
      timeout_(parent.timeout_) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

std::unique_ptr<World> World::split(int colour) const {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, colour, rank_, &comm));
  return std::unique_ptr<World>(new World(GroupTag{}, *this, comm));
}

World::~World() { finalize(); }

void World::finalize() noexcept {
  if (finalized_) return;
  finalized_ = true;
  if (group_) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    return;
  }
  set_roll_call(nullptr);
  roll_call_.reset();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  clear_process_rank();
  MPI_Finalize();
  remove_singleton_session_dir();
}

std::vector<World::Peer> World::peers() const {
  constexpr int kHostChars = 256;
  struct Packed {
    int rank, local_rank, local_size;
    char host[kHostChars];
  };
  Packed mine{rank_, local_rank_, local_size_, {}};
  host_.copy(mine.host, kHostChars - 1);
  std::vector<Packed> all(size_);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(&mine, sizeof(Packed), MPI_BYTE, all.data(), sizeof(Packed), MPI_BYTE, comm_, &request));
  wait(request, "all_gather (the ranks' identities)", timeout_);
  std::vector<Peer> out;
  for (const auto& p : all) out.push_back({p.rank, p.local_rank, p.local_size, p.host});
  return out;
}

void World::agree(const std::function<void()>& step) const {
  std::string message;
  bool failed = false;
  try {
    step();
  } catch (const UsageError& e) {
    message = e.what();
    failed = true;
  }
  const int mine = failed ? rank_ : INT_MAX;
  int first_failed = INT_MAX;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&mine, &first_failed, 1, MPI_INT, MPI_MIN, comm_, &request));
  wait(request, "agreement (a start-up or shutdown step)", timeout_);
  if (first_failed == INT_MAX) return;
  if (first_failed == rank_) print_error_line(message);
  throw CollectiveExit{kExitUsage};
}

void World::barrier() const {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm_, &request));
  wait(request, "barrier", timeout_);
}

void World::broadcast(std::string& text) const {
  int64_t size = int64_t(text.size());
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibcast(&size, 1, MPI_INT64_T, 0, comm_, &request));
  wait(request, "broadcast", timeout_);
  text.resize(size_t(size));
  if (size == 0) return;
  MPI_CHECK(MPI_Ibcast(text.data(), int(size), MPI_CHAR, 0, comm_, &request));
  wait(request, "broadcast", timeout_);
}

std::vector<std::string> World::all_gather(const std::string& mine, const char* what,
                                           std::chrono::milliseconds bound) const {
  if (bound.count() == 0) bound = timeout_;
  const int length = int(mine.size());
  std::vector<int> lengths(size_t(size_), 0);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request));
  wait(request, what, bound);
  std::vector<int> offsets(size_t(size_), 0);
  for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(size_t(offsets.back() + lengths.back()), '\0');
  MPI_CHECK(MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm_,
                            &request));
  wait(request, what, bound);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.push_back(all.substr(size_t(offsets[r]), size_t(lengths[r])));
  return out;
}

std::vector<int64_t> World::max_over_ranks(std::vector<int64_t> values, const std::string& what,
                                           std::chrono::milliseconds bound, const char* setting) const {
  std::vector<int64_t> out(values.size());
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(values.data(), out.data(), int(values.size()), MPI_INT64_T, MPI_MAX, comm_, &request));
  wait(request, what.c_str(), bound, setting);
  return out;
}

void World::wait(MPI_Request& request, const char* what, std::chrono::milliseconds bound, const char* setting) const {
  if (poll_request(request, bound)) return;
  std::string why = roll_call_clause(bound);  // the job's roll call, a group's too
  if (why.empty()) why = "another rank died, is stuck, or left the job's sequence of steps";
  abort_job(fmt::format("world {} did not complete within {:g} s ({}): {}", what,
                        std::chrono::duration<double>(bound).count(), setting_reference(setting), why),
            kExitFailure);
}

}  // namespace wt::distributed
