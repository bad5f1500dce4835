// Running one measurement in a process of its own (so that its peak RSS is
// its own): a wanbench command whose last output line is a JSON object.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace wt::bench {

// Runs `command` (a shell command line) and returns the JSON object on the
// last line of its output (log lines may come before it). Error naming
// `what`, how the child ended and its output when there is none.
nlohmann::json run_json_child(const std::string& command, const std::string& what);

}  // namespace wt::bench
