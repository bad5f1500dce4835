#include "wantrain/app/run_identity.hpp"

#include "wantrain/app/version.hpp"
#include "wantrain/config.hpp"
#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/world.hpp"

namespace wt::app {

train::RunIdentity run_identity(const std::string& program, const distributed::World& world,
                                const distributed::Comm& comm, int argc, char** argv) {
  train::RunIdentity identity;
  identity.program = program;
  identity.version = WANTRAIN_VERSION;
  identity.git_commit = git_commit();
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool quote = arg.empty() || arg.find_first_of(" \t'\"$") != std::string::npos;
    std::string quoted;  // as a shell reads it back: ' inside becomes '\''
    for (const char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    identity.command_line += (i > 0 ? " " : "") + (quote ? "'" + quoted + "'" : arg);
  }
  for (const auto& peer : world.peers()) identity.hosts.push_back(peer.host);
  identity.backend = comm.backend();
  identity.device = comm.device().str();
  return identity;
}

}  // namespace wt::app
