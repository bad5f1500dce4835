// `wantrain plot RUN_DIR [--out FILE] [--log-scale]`: PNG plots of a run's
// metrics.jsonl, drawn by scripts/plot_metrics.py with matplotlib.
#pragma once

namespace wt {

int run_plot(int argc, char** argv);

}  // namespace wt
