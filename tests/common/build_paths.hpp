// Where the test binaries find the source tree and the build's programs.
//
// The paths are not compiled in: a `-D` with a clone's absolute path would
// make every test object differ from one clone to the next, and ccache would
// miss on CI's fresh clone. CMake writes them at generate time to
// <build>/tests/build-paths.txt (key=path lines), which a test binary finds
// above its own directory; WANTRAIN_BUILD_PATHS names another file.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace wt::testing {

inline const std::map<std::string, std::string>& build_paths() {
  static const std::map<std::string, std::string> paths = [] {
    namespace fs = std::filesystem;
    fs::path file;
    if (const char* named = std::getenv("WANTRAIN_BUILD_PATHS")) {
      file = named;
    } else {
      std::error_code error;
      for (fs::path dir = fs::read_symlink("/proc/self/exe", error).parent_path(); !error && !dir.empty();
           dir = dir.parent_path()) {
        if (fs::exists(dir / "tests" / "build-paths.txt")) {
          file = dir / "tests" / "build-paths.txt";
          break;
        }
        if (dir == dir.root_path()) break;
      }
    }
    std::ifstream in(file);
    if (file.empty() || !in) {
      std::fprintf(stderr, "build_paths: no tests/build-paths.txt above this binary%s%s: run it from its build tree\n",
                   file.empty() ? "" : ", nor ", file.string().c_str());
      std::exit(2);
    }
    std::map<std::string, std::string> read;
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) read[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return read;
  }();
  return paths;
}

inline std::string build_path(const std::string& key) {
  const auto& paths = build_paths();
  const auto found = paths.find(key);
  if (found == paths.end()) {
    std::fprintf(stderr, "build_paths: tests/build-paths.txt has no '%s': re-run cmake\n", key.c_str());
    std::exit(2);
  }
  return found->second;
}

}  // namespace wt::testing

#define WANTRAIN_SOURCE_DIR ::wt::testing::build_path("source_dir")
#define WANTRAIN_WANTRAIN ::wt::testing::build_path("wantrain")
#define WANTRAIN_WANBENCH ::wt::testing::build_path("wanbench")
#define WANTRAIN_WANDATA ::wt::testing::build_path("wandata")
#define WANTRAIN_WANSAMPLE ::wt::testing::build_path("wansample")
#define WANTRAIN_CSVFIT ::wt::testing::build_path("csvfit")
#define WANTRAIN_FAULT_JOB ::wt::testing::build_path("fault_job")
