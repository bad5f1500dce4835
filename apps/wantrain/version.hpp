// The text of `--version`: wantrain's version and what it was built with.
#pragma once

#include <string>

namespace wt {
std::string version_text(const char* program);
}
