// What every tool prints for --version (its version and what it was built
// with) and, from one place, for --help or --version.
#pragma once

#include <string>

#include "wantrain/util/options.hpp"

namespace wt::app {

std::string version_text(const std::string& program);

// The git commit this build was made from (short hash, "-dirty" when the
// tree had changes, "unknown" outside a git checkout).
const char* git_commit();

// The text for a parse outcome other than Run: the help or the version.
std::string help_or_version(OptionSet::Outcome outcome, const OptionSet& options);

}  // namespace wt::app
