#include "bench_timing.hpp"
#include "io_bench.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "plausibility.hpp"
#include "wantrain/io/h5.hpp"
#include "wantrain/data/loader.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/options.hpp"
#include "wantrain/app/version.hpp"

namespace fs = std::filesystem;

namespace wt {

namespace {

struct IoConfig {
  std::string config_file, dir, shapes = "tiny,wan480p", dtype = "float32";
  int64_t tiny_samples = 2048, wan_samples = 48, bucket_samples = 1536, batch_size = 4, shards = 4;
  int prefetch = 4, rounds = 3;
  bool json = false, strict = false;
};

// A benchmark dataset: one or more buckets (sample shape, samples).
struct Shape {
  std::string name;
  std::vector<std::pair<data::SampleShape, int64_t>> buckets;
  int64_t samples() const {
    int64_t n = 0;
    for (const auto& b : buckets) n += b.second;
    return n;
  }
  double bytes() const {  // every sample, as stored
    double total = 0;
    for (const auto& [s, n] : buckets) total += double(n) * double(s.latents_bytes() + s.text_bytes());
    return total;
  }
};

// Writes the benchmark dataset once (random values; only the bytes matter);
// a later run reuses it when it was made with the same samples and shards.
// Each bucket is cut into `shards` shards (fewer when it has fewer samples).
void make_dataset(const std::string& dir, const Shape& shape, int64_t shards) {
  const std::string made =
      fmt::format("samples {} shards {} buckets {}\n", shape.samples(), shards, shape.buckets.size());
  if (std::ifstream marker(dir + "/.complete"); marker) {
    const std::string text((std::istreambuf_iterator<char>(marker)), std::istreambuf_iterator<char>());
    if (text == made) return;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  int64_t file = 0;
  for (const auto& [s, samples] : shape.buckets) {
    const at::Tensor latents = at::randn({s.channels, s.frames, s.height, s.width});
    const at::Tensor text = at::randn({s.text_len, s.text_dim});
    const int64_t cut = std::min(shards, samples);
    int64_t next = 0;
    for (int64_t k = 0; k < cut; ++k) {
      const int64_t end = data::shard_first_sample(k + 1, samples, cut);
      data::ShardWriter writer(data::shard_path(dir, file++), s, end - next, false);
      for (int64_t row = 0; next < end; ++next, ++row) writer.write(row, latents + next, text, s.text_len);
    }
  }
  std::ofstream(dir + "/.complete") << made;
}

// Every byte of /latents and /text_emb, shard after shard, in storage order,
// in reads of up to 64 MiB, as stored, into one buffer kept across calls:
// the most a reader could get.
int64_t raw_read(const data::Dataset& dataset, std::vector<char>& buffer) {
  io::Lock lock(io::library_mutex());
  int64_t bytes = 0;
  for (const auto& shard : dataset.shards()) {
    const io::Handle file = io::open_file(shard.path);
    for (const char* name : {"latents", "text_emb"}) {
      const io::Handle d = io::open_dataset(file.get(), name);
      const io::Handle type = io::dataset_type(d.get());
      const int64_t row_bytes = std::string(name) == "latents" ? shard.shape.latents_bytes() : shard.shape.text_bytes();
      const int64_t rows_per_read = std::max<int64_t>(1, (int64_t{64} << 20) / row_bytes);
      buffer.resize(std::max(buffer.size(), static_cast<size_t>(rows_per_read * row_bytes)));
      const io::Handle space = io::dataset_space(d.get());
      for (int64_t row = 0; row < shard.samples; row += rows_per_read) {
        const int64_t n = std::min(rows_per_read, shard.samples - row);
        io::select_rows(space.get(), static_cast<hsize_t>(row), static_cast<hsize_t>(n));
        const io::Handle mem = io::rows_space(space.get(), static_cast<hsize_t>(n));
        H5_CHECK(H5Dread(d.get(), type.get(), mem.get(), space.get(), H5P_DEFAULT, buffer.data()));
        bytes += n * row_bytes;
      }
    }
  }
  return bytes;
}

// One epoch through the Loader (shuffled, collated, converted to --dtype).
// The Loader lives across rounds, as in training: its buffers are warm.
int64_t loader_epoch(data::Loader& loader) {
  int64_t bytes = 0;
  for (int64_t k = 0; k < loader.sampler().batches_per_epoch(); ++k) {
    const data::Batch batch = loader.next();
    const auto& s = loader.dataset().shape_of(batch.indices.front());  // one bucket per batch
    bytes += batch.latents.size(0) * (s.latents_bytes() + s.text_bytes());
  }
  return bytes;
}

// The datasets --shapes names; UsageError when it names none.
std::vector<Shape> bench_shapes(const IoConfig& c) {
  std::vector<Shape> shapes;
  const data::SampleShape tiny{16, 1, 32, 32, 16, 64, data::Stored::Float16, data::Stored::Float32};
  if (c.shapes.find("tiny") != std::string::npos) shapes.push_back({"tiny", {{tiny, c.tiny_samples}}});
  if (c.shapes.find("wan480p") != std::string::npos)
    shapes.push_back(
        {"wan480p", {{{16, 21, 60, 104, 512, 4096, data::Stored::Float16, data::Stored::Float16}, c.wan_samples}}});
  if (c.shapes.find("buckets") != std::string::npos) {
    auto wide = tiny, clip = tiny;
    wide.width = 48;
    clip.frames = 5;
    shapes.push_back({"buckets", {{tiny, c.bucket_samples}, {wide, c.bucket_samples}, {clip, c.bucket_samples}}});
  }
  if (shapes.empty()) throw UsageError("option --shapes: name tiny, wan480p, buckets or several");

  return shapes;
}

// One shape's dataset (made once), read raw and by the Loader in
// alternating rounds; its row, printed unless --json. `reliable`: whether
// its figures passed the plausibility checks.
nlohmann::json measure_shape(const IoConfig& c, const Shape& shape, bool& reliable) {
  const std::string dir = c.dir + "/" + shape.name;
  make_dataset(dir, shape, c.shards);
  const data::Dataset dataset = data::Dataset::open(dir);
  const double sample_bytes = shape.bytes() / double(shape.samples());  // the mean, with buckets
  const at::ScalarType dtype = c.dtype == "float32"    ? at::kFloat
                               : c.dtype == "bfloat16" ? at::kBFloat16
                                                       : data::scalar_type(shape.buckets.front().first.latents);
  data::LoaderOptions options;
  options.prefetch = c.prefetch;
  options.dtype = dtype;
  data::Loader loader(dataset, data::DistributedSampler(dataset.layout(), {1, 0, c.batch_size, 1, true, false}),
                      options);
  std::vector<char> raw_buffer;
  raw_read(dataset, raw_buffer);  // warm-up: the page cache and the raw buffer,
  loader_epoch(loader);           // and the Loader's buffers
  const int64_t warm_allocations = loader.allocations();
  std::vector<double> raw, loaded, raw_seconds, loader_seconds;
  for (int r = 0; r < c.rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    const int64_t raw_bytes = raw_read(dataset, raw_buffer);
    raw_seconds.push_back(seconds_since(start));
    raw.push_back(raw_bytes / raw_seconds.back());
    start = std::chrono::steady_clock::now();
    const int64_t loader_bytes = loader_epoch(loader);
    loader_seconds.push_back(seconds_since(start));
    loaded.push_back(loader_bytes / loader_seconds.back());
  }
  const double raw_bps = median(raw), loader_bps = median(loaded);
  // Buffers the Loader allocated in the timed rounds: none once warm, also
  // when batches alternate between buckets (data/loader.hpp).
  // A handful at most, while the batches in flight first reach their
  // maximum (prefetch + 2 per shape), against thousands of batches.
  const int64_t allocations = loader.allocations() - warm_allocations;
  const int64_t batches = c.rounds * loader.sampler().batches_per_epoch();
  bench::Plausibility check;
  check.enough_rounds(c.rounds);
  check.resolvable("the raw read", median(raw_seconds));
  check.resolvable("the Loader's epoch", median(loader_seconds));
  check.within("the ratio", loader_bps / raw_bps, 0, 1.25,
               "the Loader reads the same bytes as the raw read, and converts and copies them");
  nlohmann::json row{{"shape", shape.name},
                     {"samples", shape.samples()},
                     {"sample_bytes", sample_bytes},
                     {"raw_MBps", raw_bps / 1e6},
                     {"raw_samples_per_s", raw_bps / sample_bytes},
                     {"loader_MBps", loader_bps / 1e6},
                     {"loader_samples_per_s", loader_bps / sample_bytes},
                     {"ratio", loader_bps / raw_bps},
                     {"buckets", shape.buckets.size()},
                     {"loader_allocations_warm", allocations},
                     {"loader_batches_timed", batches},
                     {"unreliable", check.notes()}};
  if (!c.json)
    std::cout << fmt::format(
                     "  {:<8} {:>8} {:>12.0f} | {:>10.1f} {:>9.1f} | {:>10.1f} {:>9.1f} | {:>6.3f} | {:>5}/{:<6}{}\n",
                     shape.name, shape.samples(), sample_bytes, raw_bps / 1e6, raw_bps / sample_bytes, loader_bps / 1e6,
                     loader_bps / sample_bytes, loader_bps / raw_bps, allocations, batches, check.row_suffix())
              << std::flush;
  reliable = check.ok();
  return row;
}

}  // namespace

int run_io_bench(distributed::World& world, int argc, char** argv) {
  IoConfig c;
  c.dir = (fs::temp_directory_path() / "wanbench-io").string();
  OptionSet options("wanbench io", "[options]");
  options.group("io")
      .standard_options(&c.config_file)
      .add("dir", &c.dir, "where the benchmark datasets are written (kept for later runs)")
      .add("shapes", &c.shapes,
           "which datasets: tiny, wan480p, buckets (three shapes, tiny-sized: batches alternate between them)")
      .add("tiny-samples", &c.tiny_samples, "samples of the tiny dataset")
      .add("wan-samples", &c.wan_samples, "samples of the Wan-480p-like dataset")
      .add("bucket-samples", &c.bucket_samples, "samples of each bucket of the buckets dataset")
      .add("batch-size", &c.batch_size, "Loader batch size")
      .add("prefetch", &c.prefetch, "Loader read-ahead in batches")
      .choice("dtype", &c.dtype, {"float32", "bfloat16", "stored"},
              "what the Loader converts to (stored: no conversion)")
      .add("rounds", &c.rounds, "alternating rounds of raw read and Loader; the median is reported")
      .flag("json", &c.json, "print JSON instead of the table")
      .flag("strict", &c.strict, "exit 1 when a row is unreliable (too short, too few rounds, an impossible ratio)");
  if (const auto outcome = options.parse(argc, argv); outcome != OptionSet::Outcome::Run) {
    std::cout << app::help_or_version(outcome, options);
    return kExitOk;
  }
  if (world.size() != 1) throw UsageError("wanbench io measures one process: run it without mpirun");
  if (c.rounds < 1 || c.batch_size < 1 || c.prefetch < 1)
    throw UsageError("options --rounds, --batch-size, --prefetch: must be at least 1");

  const std::vector<Shape> shapes = bench_shapes(c);
  nlohmann::json rows = nlohmann::json::array();
  int unreliable = 0;  // rows
  if (!c.json)
    std::cout << fmt::format(
                     "# wanbench io: batch {}, prefetch {}, Loader output {}, {} rounds (median), page cache warm\n",
                     c.batch_size, c.prefetch, c.dtype, c.rounds)
              << fmt::format("# {:<8} {:>8} {:>12} | {:>10} {:>9} | {:>10} {:>9} | {:>6} | {}\n", "shape", "samples",
                             "sample(B)", "raw MB/s", "samples/s", "Loader MB/s", "samples/s", "ratio",
                             "allocs/batches");
  for (const auto& shape : shapes) {
    bool reliable = true;
    rows.push_back(measure_shape(c, shape, reliable));
    unreliable += reliable ? 0 : 1;
  }
  if (c.json)
    std::cout << nlohmann::json{{"bench", "io"}, {"batch_size", c.batch_size}, {"prefetch", c.prefetch}, {"rows", rows}}
                     .dump(2)
              << "\n";
  else
    std::cout
        << "# ratio = Loader MB/s / raw MB/s; MB = 1e6 bytes as stored (latents + text_emb); allocs/batches = buffers "
           "the Loader allocated in the timed rounds / batches it delivered (sample(B) is the mean with buckets)\n";
  if (c.strict && unreliable > 0) {
    std::cout << fmt::format("wanbench io: {} unreliable row{} (--strict)\n", unreliable, unreliable == 1 ? "" : "s");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace wt
