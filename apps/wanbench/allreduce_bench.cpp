#include "bench_timing.hpp"
#include "allreduce_bench.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>

#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/app/version.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt {

namespace {

struct BenchConfig {
  std::string config_file;
  std::int64_t min_bytes = 1 << 10;
  std::int64_t max_bytes = 256 << 20;
  int step_factor = 4;
  int iters = 20;
  int warmup = 5;
  int rounds = 3;
  std::string dtype = "float32";
  std::string op = "sum";
  std::string collective = "all-reduce";
  bool no_check = false;
  bool json = false;
  double comm_timeout = 600;
};

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "int32") return at::kInt;
  return at::kLong;
}

distributed::ReduceOp parse_op(const std::string& name) {
  if (name == "avg") return distributed::ReduceOp::Avg;
  if (name == "max") return distributed::ReduceOp::Max;
  if (name == "min") return distributed::ReduceOp::Min;
  return distributed::ReduceOp::Sum;
}

// Rank r's input: (r + 1) * (i % 13 + 1), small integers exact in every dtype.
at::Tensor pattern(int64_t count) { return at::arange(count, at::kLong).remainder(13).add(1); }

// What every rank must hold after the reduction, derived from the pattern.
at::Tensor expected(int64_t count, distributed::ReduceOp op, int n) {
  const at::Tensor base = pattern(count).to(at::kDouble);
  switch (op) {
    case distributed::ReduceOp::Sum: return base * (n * (n + 1) / 2.0);
    case distributed::ReduceOp::Avg: return base * ((n + 1) / 2.0);
    case distributed::ReduceOp::Max: return base * n;
    case distributed::ReduceOp::Min: return base;
  }
  return base;
}

void fill(at::Tensor& buffer, int rank) { buffer.copy_(pattern(buffer.numel()) * (rank + 1)); }

// Elements further from the expected value than the dtype's rounding allows.
int64_t count_wrong(const at::Tensor& result, const at::Tensor& want, int n) {
  const double eps = at::isFloatingType(result.scalar_type()) ? (result.scalar_type() == at::kBFloat16 ? 1.0 / 128
                                                                 : result.scalar_type() == at::kHalf   ? 1.0 / 1024
                                                                                                       : 1e-6)
                                                              : 0.0;
  const at::Tensor diff = (result.to(at::kDouble) - want).abs();
  return (diff > want.abs() * (eps * n)).sum().item<int64_t>();
}

struct Measure {
  double seconds = 0;  // per op, max over ranks
  int64_t wrong = 0;   // summed over ranks
};

double max_over_ranks(const distributed::World& world, double value) {
  double out = 0;
  MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, world.comm()));
  return out;
}

template <class Op>
double time_op(const distributed::World& world, int iters, int warmup, Op op) {
  for (int i = 0; i < warmup; ++i) op();
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) op();
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return max_over_ranks(world, local);
}

int64_t sum_over_ranks(const distributed::World& world, int64_t value) {
  int64_t total = 0;
  MPI_CHECK(MPI_Allreduce(&value, &total, 1, MPI_INT64_T, MPI_SUM, world.comm()));
  return total;
}

// One collective on buffers of `count` elements in all (nccl-tests' size:
// the all-reduce's buffer, the reduce-scatter's input, the all-gather's
// output), through wantrain's Comm and through raw MPI on the same
// communicator, datatype and reduction.
struct Collective {
  std::function<void()> reset;  // the inputs to the pattern
  std::function<void()> ours, raw;
  std::function<int64_t()> wrong;  // elements off the derived result, this rank
  double bus_factor = 0;           // busbw / algbw
};

Collective make_collective(const std::string& kind, distributed::MpiComm& comm, at::ScalarType dtype,
                           distributed::ReduceOp op, int64_t count) {
  const int n = comm.size(), rank = comm.rank();
  const MPI_Datatype raw_type = distributed::mpi_datatype(dtype);
  const MPI_Op raw_op = comm.native_op(dtype, op);
  const auto options = at::TensorOptions().dtype(dtype);
  Collective c;
  if (kind == "all-reduce") {
    auto buffer = at::empty({count}, options);  // [count]
    c.reset = [=]() mutable { fill(buffer, rank); };
    c.ours = [=, &comm] { comm.all_reduce(buffer, {op}); };
    c.raw = [=, &comm]() mutable {
      MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(count), raw_type, raw_op, comm.native()));
      if (op == distributed::ReduceOp::Avg) buffer.div_(n);
    };
    c.wrong = [=] { return count_wrong(buffer, expected(count, op, n), n); };
    c.bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    return c;
  }
  const int64_t slice = count / n;
  if (kind == "reduce-scatter") {
    auto input = at::empty({slice * n}, options), output = at::empty({slice}, options);  // [n * slice], [slice]
    c.reset = [=]() mutable { fill(input, rank); };
    c.ours = [=, &comm] { comm.reduce_scatter(output, input, {op}); };
    c.raw = [=, &comm]() mutable {
      MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), static_cast<int>(slice), raw_type, raw_op,
                                         comm.native()));
      if (op == distributed::ReduceOp::Avg) output.div_(n);
    };
    c.wrong = [=] { return count_wrong(output, expected(slice * n, op, n).narrow(0, rank * slice, slice), n); };
  } else if (kind == "all-to-all") {  // chunk j of rank r's pattern goes to rank j's row r
    auto input = at::empty({n * slice}, options), output = at::empty({n * slice}, options);  // n chunks of slice
    c.reset = [=]() mutable { fill(input, rank); };
    c.ours = [=, &comm] { comm.all_to_all(output, input); };
    c.raw = [=, &comm] {
      MPI_CHECK(MPI_Alltoall(input.data_ptr(), static_cast<int>(slice), raw_type, output.data_ptr(),
                             static_cast<int>(slice), raw_type, comm.native()));
    };
    c.wrong = [=] {
      int64_t wrong = 0;
      const at::Tensor mine = pattern(slice * n).narrow(0, rank * slice, slice).to(at::kDouble);
      for (int r = 0; r < n; ++r) wrong += count_wrong(output.view({n, slice})[r], mine * (r + 1), 1);
      return wrong;
    };
  } else {  // all-gather: row r of the output is rank r's pattern
    auto input = at::empty({slice}, options), output = at::empty({n, slice}, options);  // [slice], [n, slice]
    c.reset = [=]() mutable { fill(input, rank); };
    c.ours = [=, &comm] { comm.all_gather(output, input); };
    c.raw = [=, &comm] {
      MPI_CHECK(MPI_Allgather(input.data_ptr(), static_cast<int>(slice), raw_type, output.data_ptr(),
                              static_cast<int>(slice), raw_type, comm.native()));
    };
    c.wrong = [=] {
      int64_t wrong = 0;
      for (int r = 0; r < n; ++r) wrong += count_wrong(output[r], pattern(slice).to(at::kDouble) * (r + 1), 1);
      return wrong;
    };
  }
  c.bus_factor = n > 1 ? double(n - 1) / n : 0.0;
  return c;
}

// The options; UsageError naming the option.
OptionSet::Outcome parse_allreduce_bench(distributed::World& world, int argc, char** argv, BenchConfig& cfg) {
  OptionSet options("wanbench allreduce", "[options]");
  options.group("allreduce")
      .standard_options(&cfg.config_file)
      .add("min-bytes", &cfg.min_bytes, "smallest message, bytes")
      .add("max-bytes", &cfg.max_bytes, "largest message, bytes")
      .add("step-factor", &cfg.step_factor, "each size is this many times the previous")
      .add("iters", &cfg.iters, "timed all-reduces per size and round")
      .add("warmup", &cfg.warmup, "untimed all-reduces before each timed run")
      .add("rounds", &cfg.rounds, "alternating rounds of wantrain and raw MPI; the median is reported")
      .choice("dtype", &cfg.dtype, {"float32", "float64", "bfloat16", "float16", "int32", "int64"}, "element type")
      .choice("op", &cfg.op, {"sum", "avg", "max", "min"}, "reduction")
      .choice("collective", &cfg.collective, {"all-reduce", "reduce-scatter", "all-gather", "all-to-all"},
              "the collective timed (reduce-scatter and all-gather: what --zero runs; all-to-all: what --sp runs); "
              "sizes are the whole buffer")
      .flag("no-check", &cfg.no_check, "skip the correctness check of each size")
      .flag("json", &cfg.json, "print JSON instead of the table")
      .add("comm-timeout", &cfg.comm_timeout, "seconds a collective may take before the job is ended");
  auto outcome = OptionSet::Outcome::Run;
  world.agree([&] {
    outcome = options.parse(argc, argv);
    if (outcome != OptionSet::Outcome::Run) return;
    if (cfg.min_bytes < 1 || cfg.max_bytes < cfg.min_bytes)
      throw UsageError("options --min-bytes/--max-bytes: need 1 <= min-bytes <= max-bytes");
    if (cfg.step_factor < 2) throw UsageError("option --step-factor: must be at least 2");
    if (cfg.iters < 1 || cfg.warmup < 0 || cfg.rounds < 1)
      throw UsageError("options --iters/--warmup/--rounds: need iters >= 1, warmup >= 0, rounds >= 1");
    if (cfg.collective != "all-reduce" && cfg.min_bytes < 16 * int64_t(world.size()))
      throw UsageError(fmt::format("option --min-bytes: {} needs at least 16 bytes per rank", cfg.collective));
    if (cfg.op == "avg" && (cfg.dtype == "int32" || cfg.dtype == "int64"))
      throw UsageError("option --op: avg is defined for floating dtypes only");
  });
  if (outcome != OptionSet::Outcome::Run && world.is_root()) std::cout << app::help_or_version(outcome, options);
  return outcome;
}

}  // namespace

int run_allreduce_bench(distributed::World& world, int argc, char** argv) {
  BenchConfig cfg;
  if (parse_allreduce_bench(world, argc, argv, cfg) != OptionSet::Outcome::Run) return kExitOk;

  const at::ScalarType dtype = parse_dtype(cfg.dtype);
  const distributed::ReduceOp op = parse_op(cfg.op);
  distributed::CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.comm_timeout * 1000));
  distributed::MpiComm comm(world, comm_options);

  const int n = world.size();

  nlohmann::json rows = nlohmann::json::array();
  int64_t total_wrong = 0;
  const int64_t item = at::elementSize(dtype);
  if (world.is_root() && !cfg.json) {
    std::cout << fmt::format("# wanbench allreduce: {}, {} ranks, dtype {}, op {}, {} iters x {} rounds (median)\n",
                             cfg.collective, n, cfg.dtype, cfg.op, cfg.iters, cfg.rounds)
              << fmt::format("# {:>12} {:>10} | {:>10} {:>8} {:>8} {:>6} | {:>10} {:>8} {:>8} {:>6} | {:>6}\n", "", "",
                             "wantrain", "", "", "", "raw MPI", "", "", "", "busbw")
              << fmt::format("# {:>12} {:>10} | {:>10} {:>8} {:>8} {:>6} | {:>10} {:>8} {:>8} {:>6} | {:>6}\n",
                             "size(B)", "count", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw",
                             "#wrong", "ratio");
  }
  for (int64_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= cfg.step_factor) {
    int64_t count = std::max<int64_t>(1, bytes / item);
    if (cfg.collective != "all-reduce") count = count / n * n;  // a whole slice per rank
    const Collective collective = make_collective(cfg.collective, comm, dtype, op, count);
    Measure m_ours, m_raw;
    if (!cfg.no_check) {
      for (auto [m, run] : {std::pair{&m_ours, &collective.ours}, std::pair{&m_raw, &collective.raw}}) {
        collective.reset();
        (*run)();
        m->wrong = sum_over_ranks(world, collective.wrong());
      }
    }
    // Each timed run starts from the pattern (an in-place all-reduce grows its values).
    std::vector<double> t_ours, t_raw;
    // Alternate which goes first, so neither profits from the other's warm-up.
    for (int r = 0; r < cfg.rounds; ++r) {
      for (int turn = 0; turn < 2; ++turn) {
        collective.reset();
        if ((r + turn) % 2 == 0)
          t_ours.push_back(time_op(world, cfg.iters, cfg.warmup, collective.ours));
        else
          t_raw.push_back(time_op(world, cfg.iters, cfg.warmup, collective.raw));
      }
    }
    m_ours.seconds = median(t_ours);
    m_raw.seconds = median(t_raw);
    total_wrong += m_ours.wrong + m_raw.wrong;

    const double real_bytes = static_cast<double>(count * item);
    auto row = [&](const Measure& m) {
      const double algbw = real_bytes / m.seconds / 1e9;
      return nlohmann::json{{"time_us", m.seconds * 1e6},
                            {"algbw_GBps", algbw},
                            {"busbw_GBps", algbw * collective.bus_factor},
                            {"wrong", m.wrong}};
    };
    nlohmann::json line{{"bytes", count * item}, {"count", count}, {"wantrain", row(m_ours)}, {"mpi", row(m_raw)}};
    line["busbw_ratio"] = m_raw.seconds / m_ours.seconds;
    rows.push_back(line);
    if (world.is_root() && !cfg.json) {
      const auto& a = line["wantrain"];
      const auto& b = line["mpi"];
      std::cout << fmt::format(
                       "  {:>12} {:>10} | {:>10.1f} {:>8.3f} {:>8.3f} {:>6} | {:>10.1f} {:>8.3f} {:>8.3f} {:>6} | "
                       "{:>6.3f}\n",
                       count * item, count, a["time_us"].get<double>(), a["algbw_GBps"].get<double>(),
                       a["busbw_GBps"].get<double>(), m_ours.wrong, b["time_us"].get<double>(),
                       b["algbw_GBps"].get<double>(), b["busbw_GBps"].get<double>(), m_raw.wrong,
                       line["busbw_ratio"].get<double>())
                << std::flush;
    }
    if (bytes > cfg.max_bytes / cfg.step_factor) break;
  }
  if (world.is_root()) {
    if (cfg.json) {
      std::cout << nlohmann::json{{"bench", "allreduce"}, {"collective", cfg.collective},
                                  {"ranks", n},           {"dtype", cfg.dtype},
                                  {"op", cfg.op},         {"iters", cfg.iters},
                                  {"rounds", cfg.rounds}, {"checked", !cfg.no_check},
                                  {"wrong", total_wrong}, {"rows", rows}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt::format("# busbw = algbw * {}; ratio = wantrain busbw / raw MPI busbw; {} wrong\n",
                               cfg.collective == "all-reduce" ? "2(n-1)/n" : "(n-1)/n", total_wrong);
    }
  }
  return total_wrong == 0 ? kExitOk : kExitFailure;
}

}  // namespace wt
