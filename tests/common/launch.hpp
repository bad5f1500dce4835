// Test helpers for tests that run whole programs: launch a command line, read
// its exit status and output.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace wt::testing {

struct Job {
  int status = -1;     // exit status (128 + signal when killed)
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

inline Job launch(const std::string& command_line) {
  const auto start = std::chrono::steady_clock::now();
  Job job;
  FILE* pipe = popen((command_line + " 2>&1").c_str(), "r");
  if (!pipe) return job;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) job.output += buffer.data();
  const int raw = pclose(pipe);
  job.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// An empty path under the test temporary directory, named after `name`.
inline std::string fresh(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("launch-" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A command running in the background, its output going to `log`, for tests
// that act on a job while it runs (signal or kill one of its ranks).
struct Background {
  pid_t pid = -1;  // the launcher: `exec` makes it replace the shell, so the ranks are its children
  std::string log;
  std::chrono::steady_clock::time_point start;
};

inline Background start_background(const std::string& command_line, const std::string& log) {
  Background job{-1, log, std::chrono::steady_clock::now()};
  std::filesystem::remove(log);  // an earlier run's log must not be read as this one's
  const std::string line = "exec " + command_line + " > " + log + " 2>&1";
  const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
  if (posix_spawn(&job.pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) job.pid = -1;
  return job;
}

// Waits for the background job; Job::seconds counts from its start.
inline Job finish(const Background& background) {
  Job job;
  int raw = 0;
  if (waitpid(background.pid, &raw, 0) == background.pid)
    job.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - background.start).count();
  job.output = read_text(background.log);
  return job;
}

// Polls `condition` every 20 ms for at most `seconds`; whether it held.
inline bool wait_until(const std::function<bool()>& condition, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

// The pids of the processes whose parent is `parent` (a launcher's ranks), in pid order.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

#ifdef WANTRAIN_MPIEXEC_EXECUTABLE
// `program args` under mpiexec with `ranks` processes and the project's
// MPIEXEC_PREFLAGS (root, oversubscription) and POSTFLAGS.
inline std::string mpi_command(int ranks, const std::string& program, const std::string& args) {
  return std::string(WANTRAIN_MPIEXEC_EXECUTABLE) + " " + WANTRAIN_MPIEXEC_NUMPROC_FLAG + " " + std::to_string(ranks) +
         " " + WANTRAIN_MPIEXEC_PREFLAGS + " " + program + " " + WANTRAIN_MPIEXEC_POSTFLAGS + " " + args;
}
#endif

}  // namespace wt::testing
