// Prints the parameter count of a model config, through the installed
// wantrain library: what a user's own tool would do.
#include <iostream>

#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/config.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: count_parameters CONFIG.json\n";
    return 2;
  }
  try {
    const auto config = wt::wan::load_model_config(argv[1]);
    std::cout << "wantrain " << WANTRAIN_VERSION << ": " << wt::wan::parameter_count(config) << " parameters\n";
  } catch (const wt::UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
