// `wantrain report RUN_DIR`: a run's run.json (train/run_record.hpp) as a
// short table: what ran, how far, how fast, and why it ended.
#pragma once

namespace wt {

int run_report(int argc, char** argv);

}  // namespace wt
