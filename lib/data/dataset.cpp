#include "wantrain/data/dataset.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "wantrain/io/h5.hpp"
#include "wantrain/data/stored_type.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/test_hooks.hpp"

namespace fs = std::filesystem;

namespace wt::data {

std::vector<std::string> Dataset::shard_paths(const std::string& directory) {
  std::error_code ec;
  if (!fs::exists(directory, ec)) throw UsageError(fmt::format("data: {} does not exist", directory));
  if (!fs::is_directory(directory, ec))
    throw UsageError(fmt::format("data: {} is not a directory of *.h5 shards", directory));
  std::vector<std::string> paths;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".h5") paths.push_back(it->path().string());
  if (ec) throw UsageError(fmt::format("data: cannot list {}: {}", directory, ec.message()));
  if (paths.empty()) throw UsageError(fmt::format("data: {} holds no shards (*.h5)", directory));
  std::sort(paths.begin(), paths.end());
  return paths;
}

Dataset Dataset::open(const std::string& directory) {
  std::vector<ShardInfo> shards;
  for (const auto& path : shard_paths(directory)) shards.push_back(inspect_shard(path));
  return checked(directory, std::move(shards));
}

Dataset Dataset::checked(std::string directory, std::vector<ShardInfo> shards) {
  if (shards.empty()) throw UsageError(fmt::format("data: {} holds no shards (*.h5)", directory));
  for (const auto& info : shards)
    if (const std::string why = dataset_mismatch(info.path, info.shape, shards.front().path, shards.front().shape);
        !why.empty())
      throw UsageError("data: " + why);
  Dataset dataset = of(directory, std::move(shards));
  if (dataset.size() == 0) throw UsageError(fmt::format("data: the shards in {} hold no samples", directory));
  return dataset;
}

Dataset Dataset::of(std::string directory, std::vector<ShardInfo> shards) {
  if (shards.empty()) throw Error("Dataset::of: no shards");
  Dataset dataset;
  dataset.directory_ = std::move(directory);
  dataset.offsets_.push_back(0);
  auto key = [](const SampleShape& s) { return std::array<int64_t, 3>{s.frames, s.height, s.width}; };
  std::map<std::array<int64_t, 3>, std::vector<size_t>> by_shape;  // ordered: bucket b is the b-th shape
  bool any_samples = false;
  for (const auto& info : shards) any_samples = any_samples || info.samples > 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!same_dataset(shards[i].shape, shards.front().shape)) throw Error("Dataset::of: shards of different shapes");
    dataset.offsets_.push_back(dataset.offsets_.back() + shards[i].samples);
    // An empty shard makes no bucket of its own (no shape to plan, validate
    // or sample for); it joins its shape's bucket if there is one.
    if (shards[i].samples > 0 || !any_samples) by_shape[key(shards[i].shape)].push_back(i);
  }
  for (size_t i = 0; i < shards.size(); ++i)
    if (shards[i].samples == 0 && any_samples)
      if (const auto it = by_shape.find(key(shards[i].shape)); it != by_shape.end()) {
        it->second.push_back(i);
        std::sort(it->second.begin(), it->second.end());
      }
  dataset.shard_bucket_.assign(shards.size(), 0);  // an empty shard outside every bucket: never sampled
  for (auto& [shape, members] : by_shape) {
    Bucket bucket{shards[members.front()].shape, members, 0};
    for (const size_t i : members) {
      bucket.samples += shards[i].samples;
      dataset.shard_bucket_[i] = static_cast<int>(dataset.buckets_.size());
    }
    dataset.buckets_.push_back(std::move(bucket));
  }
  dataset.shards_ = std::move(shards);
  return dataset;
}

const SampleShape& Dataset::shape() const {
  if (buckets_.size() > 1)
    throw UsageError(fmt::format("data: {} holds samples of {} shapes ({}); this needs a dataset of one", directory_,
                                 buckets_.size(), describe_buckets()));
  return buckets_.front().shape;
}

const SampleShape& Dataset::largest_shape() const {
  const auto elements = [](const Bucket& b) { return b.shape.frames * b.shape.height * b.shape.width; };
  return std::max_element(buckets_.begin(), buckets_.end(),
                          [&](const Bucket& a, const Bucket& b) { return elements(a) < elements(b); })
      ->shape;
}

std::vector<int64_t> Dataset::bucket_indices(size_t b) const {
  std::vector<int64_t> indices;
  for (const size_t shard : buckets_.at(b).shards)
    for (int64_t i = offsets_[shard]; i < offsets_[shard + 1]; ++i) indices.push_back(i);
  return indices;
}

DataLayout Dataset::layout() const {
  DataLayout layout(shard_sizes());
  layout.shard_buckets = shard_bucket_;
  for (const auto& b : buckets_) layout.bucket_names.push_back(b.name());
  return layout;
}

std::string Dataset::describe_buckets() const {
  if (buckets_.size() == 1) return buckets_.front().shape.latents_string();
  std::string out;
  for (const auto& b : buckets_)
    out += fmt::format("{}{} ({} sample{})", out.empty() ? "" : ", ", b.name(), b.samples, b.samples == 1 ? "" : "s");
  return out;
}

std::vector<int64_t> Dataset::shard_sizes() const {
  std::vector<int64_t> sizes;
  for (const auto& s : shards_) sizes.push_back(s.samples);
  return sizes;
}

Dataset::Location Dataset::locate(int64_t index) const {
  if (index < 0 || index >= size())
    throw Error(fmt::format("data: sample {} is outside the dataset's {} samples", index, size()));
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  const size_t shard = static_cast<size_t>(it - offsets_.begin()) - 1;
  return {shard, index - offsets_[shard]};
}

struct SampleReader::Open {
  io::Handle file, latents, text, prompt, y, clip_fea, vace;              // y, clip_fea, vace: where the shard has them
  std::vector<int32_t> text_len;                                          // the whole /text_len, read once
  io::Handle latents_space, text_space, y_space, clip_space, vace_space;  // file dataspaces, reused per read
  io::Handle latents_type, text_type;                                // memory types: the stored ones (no conversion)
  io::Handle latents_row, text_row, y_row, clip_row, vace_row, one;  // memory dataspaces of one sample
};

SampleReader::SampleReader(const Dataset& dataset) : dataset_(dataset), open_(dataset.shards().size()) {}

SampleReader::~SampleReader() {
  io::Lock lock(io::library_mutex());
  open_.clear();
}

namespace {
io::Handle flat_space(int64_t n) {
  const hsize_t count = static_cast<hsize_t>(n);
  return io::Handle(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
}
}  // namespace

SampleReader::Open& SampleReader::file(size_t shard) {
  if (!open_[shard]) {
    const SampleShape& s = dataset_.shards()[shard].shape;
    auto o = std::make_unique<Open>();
    o->file = io::open_file(dataset_.shards()[shard].path);
    o->latents = io::open_dataset(o->file.get(), "latents");
    o->text = io::open_dataset(o->file.get(), "text_emb");
    const io::Handle lengths = io::open_dataset(o->file.get(), "text_len");
    // Opened where the dataset saw them; check_shard_unchanged names them if they came or went.
    if (s.has_condition() && io::exists(o->file.get(), "y")) o->y = io::open_dataset(o->file.get(), "y");
    if (s.has_condition() && s.clip_tokens > 0 && io::exists(o->file.get(), "clip_fea"))
      o->clip_fea = io::open_dataset(o->file.get(), "clip_fea");
    if (s.has_vace() && io::exists(o->file.get(), "vace_context"))
      o->vace = io::open_dataset(o->file.get(), "vace_context");
    check_shard_unchanged(dataset_.shards()[shard], o->file.get(), o->latents.get(), o->text.get(), lengths.get(),
                          o->y ? o->y.get() : H5I_INVALID_HID, o->clip_fea ? o->clip_fea.get() : H5I_INVALID_HID,
                          o->vace ? o->vace.get() : H5I_INVALID_HID);
    o->text_len.resize(static_cast<size_t>(dataset_.shards()[shard].samples));
    if (!o->text_len.empty())
      H5_CHECK(H5Dread(lengths.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, o->text_len.data()));
    if (dataset_.shards()[shard].has_prompt) o->prompt = io::open_dataset(o->file.get(), "prompt");
    o->latents_space = io::dataset_space(o->latents.get());
    o->text_space = io::dataset_space(o->text.get());
    o->latents_type = hdf5_type(s.latents);
    o->text_type = hdf5_type(s.text);
    o->latents_row = io::rows_space(o->latents_space.get(), 1);  // [1, C, F, H, W]
    o->text_row = io::rows_space(o->text_space.get(), 1);        // [1, L, D]
    if (o->y) {
      o->y_space = io::dataset_space(o->y.get());
      o->y_row = io::rows_space(o->y_space.get(), 1);  // [1, Cy, F, H, W]
    }
    if (o->clip_fea) {
      o->clip_space = io::dataset_space(o->clip_fea.get());
      o->clip_row = io::rows_space(o->clip_space.get(), 1);  // [1, T, D]
    }
    if (o->vace) {
      o->vace_space = io::dataset_space(o->vace.get());
      o->vace_row = io::rows_space(o->vace_space.get(), 1);  // [1, Cv, R + F, H, W]
    }
    o->one = flat_space(1);
    open_[shard] = std::move(o);
  }
  return *open_[shard];
}

void SampleReader::read(int64_t index, const at::Tensor& latents, const at::Tensor& text_emb, int32_t& text_len,
                        const SampleCondition* condition) {
  const Dataset::Location where = dataset_.locate(index);
  const ShardInfo& shard = dataset_.shards()[where.shard];
  const SampleShape& s = shard.shape;
  if (latents.sizes() != at::IntArrayRef{s.channels, s.frames, s.height, s.width} ||
      text_emb.sizes() != at::IntArrayRef{s.text_len, s.text_dim} || !latents.is_contiguous() ||
      !text_emb.is_contiguous() || latents.scalar_type() != scalar_type(s.latents) ||
      text_emb.scalar_type() != scalar_type(s.text))
    throw Error(
        fmt::format("data: sample {} of shard {} is latents {}, text_emb {}; the tensors to read it into are "
                    "not (a batch of samples of several shapes?)",
                    index, shard.path, s.latents_string(), s.text_string()));
  // The condition's tensors that are given are read; each must fit the shard's.
  const at::Tensor* y = condition && condition->y.defined() ? &condition->y : nullptr;
  const at::Tensor* clip = condition && condition->clip_fea.defined() ? &condition->clip_fea : nullptr;
  const at::Tensor* vace = condition && condition->vace_context.defined() ? &condition->vace_context : nullptr;
  const auto fits = [](const at::Tensor& t, at::IntArrayRef sizes, Stored stored) {
    return t.sizes() == sizes && t.is_contiguous() && t.scalar_type() == scalar_type(stored);
  };
  if ((y && (!s.has_condition() || !fits(*y, {s.condition_channels, s.frames, s.height, s.width}, s.latents))) ||
      (clip && (s.clip_tokens <= 0 || !fits(*clip, {s.clip_tokens, s.clip_dim}, s.text))) ||
      (vace &&
       (!s.has_vace() || !fits(*vace, {s.vace_channels, s.vace_references + s.frames, s.height, s.width}, s.latents))))
    throw Error(
        fmt::format("data: sample {} of shard {} has y {}, clip_fea {}, vace_context {}; the tensors to read its "
                    "condition into are not",
                    index, shard.path, s.condition_string(), s.clip_string(), s.vace_string()));
  io::Lock lock(io::library_mutex());
  try {
    test_failure("sample_read");
    Open& o = file(where.shard);
    const hsize_t row = static_cast<hsize_t>(where.row);
    io::select_rows(o.latents_space.get(), row, 1);
    H5_CHECK(H5Dread(o.latents.get(), o.latents_type.get(), o.latents_row.get(), o.latents_space.get(), H5P_DEFAULT,
                     latents.data_ptr()));
    io::select_rows(o.text_space.get(), row, 1);
    H5_CHECK(H5Dread(o.text.get(), o.text_type.get(), o.text_row.get(), o.text_space.get(), H5P_DEFAULT,
                     text_emb.data_ptr()));
    if (y) {
      io::select_rows(o.y_space.get(), row, 1);
      H5_CHECK(H5Dread(o.y.get(), o.latents_type.get(), o.y_row.get(), o.y_space.get(), H5P_DEFAULT, y->data_ptr()));
    }
    if (clip) {
      io::select_rows(o.clip_space.get(), row, 1);
      H5_CHECK(H5Dread(o.clip_fea.get(), o.text_type.get(), o.clip_row.get(), o.clip_space.get(), H5P_DEFAULT,
                       clip->data_ptr()));
    }
    if (vace) {
      io::select_rows(o.vace_space.get(), row, 1);
      H5_CHECK(H5Dread(o.vace.get(), o.latents_type.get(), o.vace_row.get(), o.vace_space.get(), H5P_DEFAULT,
                       vace->data_ptr()));
    }
    text_len = o.text_len[row];
  } catch (const Error& e) {
    throw Error(
        fmt::format("data: cannot read sample {} (row {}) of shard {}: {}", index, where.row, shard.path, e.what()));
  }
}

std::string SampleReader::prompt(int64_t index) {
  const Dataset::Location where = dataset_.locate(index);
  io::Lock lock(io::library_mutex());
  Open& o = file(where.shard);
  if (!o.prompt) return {};
  const io::Handle space = io::dataset_space(o.prompt.get());
  io::select_rows(space.get(), static_cast<hsize_t>(where.row), 1);
  const io::Handle type = io::dataset_type(o.prompt.get());
  char* text = nullptr;
  H5_CHECK(H5Dread(o.prompt.get(), type.get(), o.one.get(), space.get(), H5P_DEFAULT, &text));
  std::string value = text ? text : "";
  H5Dvlen_reclaim(type.get(), o.one.get(), H5P_DEFAULT, &text);
  return value;
}

}  // namespace wt::data
