#include "wantrain/util/text.hpp"

#include <sstream>

namespace wt {

std::vector<std::string> split_list(const std::string& text, char separator) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, separator);) items.push_back(item);
  return items;
}

}  // namespace wt
