#include "child_json.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>

#include "wantrain/util/error.hpp"

namespace wt::bench {

nlohmann::json run_json_child(const std::string& command, const std::string& what) {
  FILE* child = popen(command.c_str(), "r");
  if (!child) throw Error(fmt::format("{}: cannot start {}", what, command));
  std::string output;
  char buffer[4096];
  while (const size_t n = fread(buffer, 1, sizeof(buffer), child)) output.append(buffer, n);
  const int status = pclose(child);
  const std::string how = WIFSIGNALED(status) ? fmt::format("killed by signal {} (out of memory?)", WTERMSIG(status))
                          : WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                              : fmt::format("wait status {}", status);
  const auto json_start = output.rfind("\n{");  // the last line; log lines may come first
  try {
    return nlohmann::json::parse(output.substr(json_start == std::string::npos ? 0 : json_start + 1));
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("{} failed ({}): {}", what, how, output.empty() ? std::string("no output") : output));
  }
}

}  // namespace wt::bench
