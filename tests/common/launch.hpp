// Test helpers for tests that run whole programs: launch a command line, read
// its exit status and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

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

#ifdef WANTRAIN_MPIEXEC_EXECUTABLE
// `program args` under mpiexec with `ranks` processes and the project's
// MPIEXEC_PREFLAGS (root, oversubscription) and POSTFLAGS.
inline std::string mpi_command(int ranks, const std::string& program, const std::string& args) {
  return std::string(WANTRAIN_MPIEXEC_EXECUTABLE) + " " + WANTRAIN_MPIEXEC_NUMPROC_FLAG + " " + std::to_string(ranks) +
         " " + WANTRAIN_MPIEXEC_PREFLAGS + " " + program + " " + WANTRAIN_MPIEXEC_POSTFLAGS + " " + args;
}
#endif

}  // namespace wt::testing
