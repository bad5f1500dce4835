// Where wandata writes shards: a directory that is created if missing and
// must not hold shards already, so no dataset is ever mixed with or
// overwritten by another.
#pragma once

#include <string>

namespace wt {
void prepare_output_directory(const std::string& directory);
}
