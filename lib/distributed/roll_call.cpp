#include "wantrain/distributed/roll_call.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <list>
#include <map>

#include "wantrain/distributed/mpi_check.hpp"

namespace wt::distributed {

namespace {
constexpr int kPing = 1, kPong = 2;
constexpr int kHostChars = 256;
std::atomic<RollCall*> registered{nullptr};

std::string seconds(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", std::chrono::duration<double>(d).count());
}
}  // namespace

RollCall::RollCall(MPI_Comm world, const std::string& host, bool respond) {
  MPI_CHECK(MPI_Comm_dup(world, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  std::vector<char> all(static_cast<size_t>(size_) * kHostChars, '\0');
  std::vector<char> mine(kHostChars, '\0');
  host.copy(mine.data(), kHostChars - 1);
  MPI_CHECK(MPI_Allgather(mine.data(), kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, comm_));
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + static_cast<size_t>(r) * kHostChars);
  if (size_ > 1 && respond) responder_ = std::thread([this] { this->respond(); });
}

RollCall::~RollCall() {
  stop_ = true;
  if (responder_.joinable()) responder_.join();
  // Not MPI_Comm_free: it is collective, and a rank may leave without the others.
}

void RollCall::respond() {
  // On the heap, never freed: a receive left pending after an MPI error
  // must not write into a stack frame that is gone.
  int& incoming = *new int(0);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Irecv(&incoming, 1, MPI_INT, MPI_ANY_SOURCE, kPing, comm_, &request) != MPI_SUCCESS) return;
  while (!stop_) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&request, &arrived, &status) != MPI_SUCCESS) return;
    if (!arrived) {
      // An answer within 0.1 s is plenty (a roll call waits at least 0.5 s);
      // polling every 10 ms cost 15-20% of a 1 MiB all-reduce on 2 shared
      // vCPUs (docs/performance.md), every 100 ms nothing measurable.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const int answer = incoming;  // the round asked about: stale answers are told apart
    // One int goes eagerly: the send returns even if the asker has gone since.
    if (MPI_Send(&answer, 1, MPI_INT, status.MPI_SOURCE, kPong, comm_) != MPI_SUCCESS) return;
    if (MPI_Irecv(&incoming, 1, MPI_INT, MPI_ANY_SOURCE, kPing, comm_, &request) != MPI_SUCCESS) return;
  }
  MPI_Cancel(&request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

std::vector<int> RollCall::silent(std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(asking_);
  // The pinged value must outlive sends to ranks that never receive them.
  static std::list<int> asked;
  asked.push_back(++round_);
  int* const round = &asked.back();
  std::vector<int> answers(static_cast<size_t>(size_), 0);
  std::vector<MPI_Request> pending(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request sent = MPI_REQUEST_NULL;
    if (MPI_Isend(round, 1, MPI_INT, r, kPing, comm_, &sent) == MPI_SUCCESS) MPI_Request_free(&sent);
    MPI_Irecv(&answers[static_cast<size_t>(r)], 1, MPI_INT, r, kPong, comm_, &pending[static_cast<size_t>(r)]);
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    bool waiting = false;
    for (int r = 0; r < size_; ++r) {
      auto& request = pending[static_cast<size_t>(r)];
      if (request == MPI_REQUEST_NULL) continue;
      int arrived = 0;
      if (MPI_Test(&request, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
      if (!arrived) {
        waiting = true;
      } else if (answers[static_cast<size_t>(r)] != *round) {  // an answer to an earlier roll call
        MPI_Irecv(&answers[static_cast<size_t>(r)], 1, MPI_INT, r, kPong, comm_, &request);
        waiting = true;
      }
    }
    if (!waiting || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    auto& request = pending[static_cast<size_t>(r)];
    if (r == rank_) continue;
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      MPI_Status status;
      MPI_Wait(&request, &status);
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      // An answer may have arrived between the last test and the cancel.
      if (cancelled || answers[static_cast<size_t>(r)] != *round) out.push_back(r);
    }
  }
  return out;
}

std::string RollCall::describe(std::chrono::milliseconds wait) {
  const std::vector<int> missing = silent(wait);
  if (missing.empty())
    return fmt::format(
        "every rank answers a roll call (within {}), so none has died: one skipped this collective, "
        "issued collectives in a different order, or is this slow",
        seconds(wait));
  // "ranks 2, 3 on node1 and rank 5 on node2", hosts in rank order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> by_host;
  for (int r : missing) {
    const auto& host = hosts_[static_cast<size_t>(r)];
    if (by_host.find(host) == by_host.end()) order.push_back(host);
    by_host[host].push_back(r);
  }
  std::vector<std::string> parts;
  for (const auto& host : order) {
    const auto& ranks = by_host[host];
    parts.push_back(fmt::format("rank{} {} on {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "), host));
  }
  return fmt::format("no answer to a roll call within {} from {}: {}", seconds(wait), fmt::join(parts, " and "),
                     missing.size() > 1 ? "they have exited, been stopped, or lost their nodes"
                                        : "it has exited, been stopped, or lost its node");
}

void set_roll_call(RollCall* roll_call) { registered.store(roll_call); }

std::string roll_call_clause(std::chrono::milliseconds timeout) {
  RollCall* roll_call = registered.load();
  if (roll_call == nullptr || roll_call->hosts().size() < 2) return "";
  return roll_call->describe(
      std::clamp<std::chrono::milliseconds>(timeout / 5, std::chrono::milliseconds(500), std::chrono::seconds(5)));
}

}  // namespace wt::distributed
