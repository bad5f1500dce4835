#include "wantrain/data/shard.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <utility>

#include "wantrain/io/h5.hpp"
#include "wantrain/data/stored_type.hpp"
#include "wantrain/util/error.hpp"

namespace wt::data {

const char* to_string(Stored stored) {
  switch (stored) {
    case Stored::Float32: return "float32";
    case Stored::Float16: return "float16";
    case Stored::BFloat16: return "bfloat16";
  }
  return "unknown";
}

at::ScalarType scalar_type(Stored stored) {
  switch (stored) {
    case Stored::Float32: return at::kFloat;
    case Stored::Float16: return at::kHalf;
    case Stored::BFloat16: return at::kBFloat16;
  }
  return at::kFloat;
}

Stored parse_stored(const std::string& name) {
  if (name == "float32") return Stored::Float32;
  if (name == "float16") return Stored::Float16;
  if (name == "bfloat16") return Stored::BFloat16;
  throw UsageError(fmt::format("dtype '{}' is not one of float32|float16|bfloat16", name));
}

std::string shard_path(const std::string& directory, int64_t k) {
  return fmt::format("{}/shard-{:05d}.h5", directory, k);
}

int64_t shard_first_sample(int64_t k, int64_t total, int64_t shards) { return k * total / shards; }

bool SampleShape::operator==(const SampleShape& o) const {
  return channels == o.channels && frames == o.frames && height == o.height && width == o.width &&
         text_len == o.text_len && text_dim == o.text_dim && latents == o.latents && text == o.text &&
         condition_channels == o.condition_channels && clip_tokens == o.clip_tokens && clip_dim == o.clip_dim &&
         vace_channels == o.vace_channels && vace_references == o.vace_references;
}

bool same_dataset(const SampleShape& a, const SampleShape& b) {
  return a.channels == b.channels && a.text_len == b.text_len && a.text_dim == b.text_dim && a.latents == b.latents &&
         a.text == b.text && a.condition_channels == b.condition_channels && a.clip_tokens == b.clip_tokens &&
         a.clip_dim == b.clip_dim && a.vace_channels == b.vace_channels && a.vace_references == b.vace_references;
}

namespace {
// What a shard holds beside its latents and text, for dataset_mismatch.
std::string condition_part(const SampleShape& s) {
  if (s.has_vace()) return fmt::format("/vace_context {}", s.vace_string());
  if (!s.has_condition()) return "no /y";
  return fmt::format("/y {}, /clip_fea {}", s.condition_string(), s.clip_string());
}
}  // namespace

std::string dataset_mismatch(const std::string& path_a, const SampleShape& a, const std::string& path_b,
                             const SampleShape& b) {
  if (same_dataset(a, b)) return "";
  // Image-to-video and text-to-video shards: the one difference that matters, said alone.
  if (a.has_vace() != b.has_vace())
    return fmt::format(
        "shard {} has {} but shard {} has {} (a dataset is for a VACE model, every shard with /vace_context, or not, "
        "none with it)",
        path_a, a.has_vace() ? condition_part(a) : "no /vace_context", path_b,
        b.has_vace() ? condition_part(b) : "no /vace_context");
  if (a.has_condition() != b.has_condition())
    return fmt::format(
        "shard {} has {} but shard {} has {} (a dataset is image-to-video, every shard with /y, or text-to-video, "
        "none with it)",
        path_a, condition_part(a), path_b, condition_part(b));
  const auto holds = [](const SampleShape& s) {
    return fmt::format("latents {}, text_emb {}{}", s.latents_string(), s.text_string(),
                       s.has_condition() || s.has_vace() ? ", " + condition_part(s) : "");
  };
  return fmt::format(
      "shard {} has {} but shard {} has {} (the shards of a dataset may differ only in the latents' frames, height "
      "and width)",
      path_a, holds(a), path_b, holds(b));
}

std::string SampleShape::latents_string() const {
  return fmt::format("[N,{},{},{},{}] {}", channels, frames, height, width, to_string(latents));
}
std::string SampleShape::bucket_name() const { return fmt::format("{}x{}x{}", frames, height, width); }
std::string SampleShape::text_string() const {
  return fmt::format("[N,{},{}] {}", text_len, text_dim, to_string(text));
}
std::string SampleShape::condition_string() const {
  if (!has_condition()) return "none";
  return fmt::format("[N,{},{},{},{}] {}", condition_channels, frames, height, width, to_string(latents));
}
std::string SampleShape::clip_string() const {
  if (clip_tokens <= 0) return "none";
  return fmt::format("[N,{},{}] {}", clip_tokens, clip_dim, to_string(text));
}
std::string SampleShape::vace_string() const {
  if (!has_vace()) return "none";
  return fmt::format("[N,{},{},{},{}] {}", vace_channels, vace_references + frames, height, width, to_string(latents));
}
int64_t SampleShape::latents_bytes() const {
  return channels * frames * height * width * (latents == Stored::Float32 ? 4 : 2);
}
int64_t SampleShape::text_bytes() const { return text_len * text_dim * (text == Stored::Float32 ? 4 : 2); }
int64_t SampleShape::condition_bytes() const {
  return (condition_channels * frames + vace_channels * (vace_references + frames)) * height * width *
             (latents == Stored::Float32 ? 4 : 2) +
         clip_tokens * clip_dim * (text == Stored::Float32 ? 4 : 2);
}

namespace {

std::string dims_string(const std::vector<hsize_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}

// The storage of a float dataset, or a UsageError naming it.
Stored stored_of(const std::string& path, hid_t dataset, const char* name) {
  const io::Handle type = io::dataset_type(dataset);
  if (H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 4) return Stored::Float32;
  if (io::is_float16(type.get())) return Stored::Float16;
  // bfloat16 is stored as its raw bits: unsigned 16-bit integers. A signed
  // type would be read through HDF5's conversion, which clamps negatives to 0.
  if (H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 2 &&
      H5Tget_sign(type.get()) == H5T_SGN_NONE && io::has_attribute(dataset, "dtype") &&
      io::read_string_attribute(dataset, "dtype") == "bfloat16")
    return Stored::BFloat16;
  throw UsageError(fmt::format("data: shard {}: {} has an unsupported element type (expected {})", path, name,
                               "float32, float16, or uint16 with attribute dtype=\"bfloat16\""));
}

// Caps on a shard's sizes, checked before anything is allocated from them:
// far above real data (Wan 720p, 81 frames: latents [16, 21, 90, 160]);
// the element count a sample is computed saturating, so it cannot wrap.
constexpr hsize_t kMaxSampleDim = hsize_t(1) << 20;
constexpr hsize_t kMaxSampleElements = hsize_t(1) << 32;

// A per-sample dataset's sizes against the caps (fail names the file).
template <class Fail>
void check_caps(const char* name, const std::vector<hsize_t>& dims, Fail fail) {
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] < 1 || dims[i] > kMaxSampleDim)
      throw fail(fmt::format("{} has shape {}: each per-sample size must be in 1..{}", name, dims_string(dims),
                             kMaxSampleDim));
  // The product saturates past the cap instead of wrapping around.
  hsize_t elements = 1;
  for (size_t i = 1; i < dims.size(); ++i) {
    const hsize_t d = std::max<hsize_t>(dims[i], 1);
    elements = elements > (kMaxSampleElements + 1) / d ? kMaxSampleElements + 1 : elements * d;
  }
  if (elements > kMaxSampleElements)
    throw fail(
        fmt::format("{} has shape {}: more than {} elements a sample", name, dims_string(dims), kMaxSampleElements));
}

// Checks the dimensions read from a shard against the caps and each other
// (fail names the file); N may not exceed the file's size in bytes, since
// every sample stores at least its text_len.
template <class Fail>
void check_dims(const std::vector<hsize_t>& ld, const std::vector<hsize_t>& td, const std::vector<hsize_t>& nd,
                uintmax_t file_bytes, Fail fail) {
  if (ld.size() != 5)
    throw fail(fmt::format("/latents has {} dimensions {}, expected 5 [N,C,F,H,W]", ld.size(), dims_string(ld)));
  if (td.size() != 3)
    throw fail(fmt::format("/text_emb has {} dimensions {}, expected 3 [N,L,D]", td.size(), dims_string(td)));
  if (nd.size() != 1)
    throw fail(fmt::format("/text_len has {} dimensions {}, expected 1 [N]", nd.size(), dims_string(nd)));
  if (td[0] != ld[0] || nd[0] != ld[0])
    throw fail(fmt::format("sample counts disagree: /latents {}, /text_emb {}, /text_len {}", ld[0], td[0], nd[0]));
  if (file_bytes > 0 && ld[0] > file_bytes)
    throw fail(
        fmt::format("{} samples cannot be stored in a file of {} bytes (corrupt or hostile?)", ld[0], file_bytes));
  check_caps("/latents", ld, fail);
  check_caps("/text_emb", td, fail);
}

// The condition's dimensions against /latents' (ld, already checked) and
// the caps: /y [N, Cy, F, H, W] with the latents' N, F, H, W (a sample's
// condition is frame for frame its latents'); /clip_fea [N, T, D].
template <class Fail>
void check_condition_dims(const std::vector<hsize_t>& ld, const std::vector<hsize_t>& yd,
                          const std::vector<hsize_t>* cd, Fail fail) {
  if (yd.size() != 5)
    throw fail(fmt::format("/y has {} dimensions {}, expected 5 [N,Cy,F,H,W]", yd.size(), dims_string(yd)));
  if (yd[0] != ld[0] || yd[2] != ld[2] || yd[3] != ld[3] || yd[4] != ld[4])
    throw fail(fmt::format("/y has shape {} but /latents {}: /y must have the latents' N, F, H and W", dims_string(yd),
                           dims_string(ld)));
  check_caps("/y", yd, fail);
  if (!cd) return;
  if (cd->size() != 3)
    throw fail(fmt::format("/clip_fea has {} dimensions {}, expected 3 [N,T,D]", cd->size(), dims_string(*cd)));
  if ((*cd)[0] != ld[0])
    throw fail(fmt::format("/clip_fea has shape {} but /latents {}: they must have the same N", dims_string(*cd),
                           dims_string(ld)));
  check_caps("/clip_fea", *cd, fail);
}

// /vace_context [N, Cv, R + F, H, W] against /latents' (ld): the latents'
// N, H and W, and at least their F (R >= 0 reference frames first).
template <class Fail>
void check_vace_dims(const std::vector<hsize_t>& ld, const std::vector<hsize_t>& vd, Fail fail) {
  if (vd.size() != 5)
    throw fail(
        fmt::format("/vace_context has {} dimensions {}, expected 5 [N,Cv,R+F,H,W]", vd.size(), dims_string(vd)));
  if (vd[0] != ld[0] || vd[2] < ld[2] || vd[3] != ld[3] || vd[4] != ld[4])
    throw fail(
        fmt::format("/vace_context has shape {} but /latents {}: it must have the latents' N, H and W, and "
                    "their F after its reference frames",
                    dims_string(vd), dims_string(ld)));
  check_caps("/vace_context", vd, fail);
}

}  // namespace

io::Handle hdf5_type(Stored stored) {
  switch (stored) {
    case Stored::Float32: return io::Handle(H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)), H5Tclose);
    case Stored::Float16: return io::float16_type();
    case Stored::BFloat16: return io::Handle(H5_CHECK(H5Tcopy(H5T_STD_U16LE)), H5Tclose);  // raw bits
  }
  throw Error("unknown storage");
}

ShardInfo inspect_shard(const std::string& path, std::vector<std::string>* sample_problems) {
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  ShardInfo info;
  info.path = path;
  auto fail = [&](const std::string& what) { return UsageError(fmt::format("data: shard {}: {}", path, what)); };

  if (H5Fis_hdf5(path.c_str()) <= 0) throw fail("not an HDF5 file, or truncated or corrupt");
  io::Handle file;
  try {
    file = io::open_file(path);
  } catch (const Error&) {
    throw fail("cannot be opened as HDF5 (truncated or corrupt?)");
  }
  const hid_t root = file.get();
  if (!io::has_attribute(root, "format") || io::read_string_attribute(root, "format") != kShardFormat)
    throw fail(fmt::format("root attribute format is missing or not \"{}\"", kShardFormat));
  if (!io::has_attribute(root, "version")) throw fail("root attribute version is missing");
  const auto version = io::read_int_attribute(root, "version");
  if (version < kOldestShardVersion || version > kShardVersion)
    throw fail(fmt::format("format version {} is not supported (this wantrain reads versions {} to {})", version,
                           kOldestShardVersion, kShardVersion));
  info.version = static_cast<int>(version);
  for (const char* name : {"latents", "text_emb", "text_len"})
    if (!io::exists(root, name)) throw fail(fmt::format("dataset /{} is missing", name));
  const bool has_y = io::exists(root, "y"), has_clip = io::exists(root, "clip_fea");
  // A shard with a condition says version 3, so that a reader that knows
  // no condition refuses it; an older version with one was not written by
  // a writer that meant it.
  for (const auto& [name, present] : {std::pair{"/y", has_y}, {"/clip_fea", has_clip}})
    if (present && version < 3)
      throw fail(fmt::format(
          "{} in a format version {} shard (the image-to-video condition came with version 3: a shard that holds "
          "it says 3)",
          name, version));
  if (has_clip && !has_y)
    throw fail("/clip_fea without /y (CLIP features are part of an image-to-video condition, whose /y is missing)");
  const bool has_vace = io::exists(root, "vace_context");
  if (has_vace && version < 4)
    throw fail(
        fmt::format("/vace_context in a format version {} shard (the VACE context came with version 4: a shard "
                    "that holds it says 4)",
                    version));

  try {
    const io::Handle latents = io::open_dataset(root, "latents");
    const io::Handle text = io::open_dataset(root, "text_emb");
    const io::Handle lengths = io::open_dataset(root, "text_len");
    const auto ld = io::dims(latents.get()), td = io::dims(text.get()), nd = io::dims(lengths.get());
    std::error_code size_error;
    const uintmax_t file_bytes = std::filesystem::file_size(path, size_error);
    check_dims(ld, td, nd, size_error ? 0 : file_bytes, fail);  // 0: size unknown, that check skipped
    info.samples = static_cast<int64_t>(ld[0]);
    info.shape = {static_cast<int64_t>(ld[1]),
                  static_cast<int64_t>(ld[2]),
                  static_cast<int64_t>(ld[3]),
                  static_cast<int64_t>(ld[4]),
                  static_cast<int64_t>(td[1]),
                  static_cast<int64_t>(td[2]),
                  stored_of(path, latents.get(), "/latents"),
                  stored_of(path, text.get(), "/text_emb")};
    if (has_y) {
      const io::Handle y = io::open_dataset(root, "y");
      const auto yd = io::dims(y.get());
      io::Handle clip;
      std::vector<hsize_t> cd;
      if (has_clip) {
        clip = io::open_dataset(root, "clip_fea");
        cd = io::dims(clip.get());
      }
      check_condition_dims(ld, yd, has_clip ? &cd : nullptr, fail);
      // Stored as the latents and the text are: a batch converts each pair alike.
      if (const Stored stored = stored_of(path, y.get(), "/y"); stored != info.shape.latents)
        throw fail(fmt::format("/y is {} but /latents {}: /y is stored as /latents is", to_string(stored),
                               to_string(info.shape.latents)));
      info.shape.condition_channels = static_cast<int64_t>(yd[1]);
      if (has_clip) {
        if (const Stored stored = stored_of(path, clip.get(), "/clip_fea"); stored != info.shape.text)
          throw fail(fmt::format("/clip_fea is {} but /text_emb {}: /clip_fea is stored as /text_emb is",
                                 to_string(stored), to_string(info.shape.text)));
        info.shape.clip_tokens = static_cast<int64_t>(cd[1]);
        info.shape.clip_dim = static_cast<int64_t>(cd[2]);
      }
    }
    if (has_vace) {
      const io::Handle vace = io::open_dataset(root, "vace_context");
      const auto vd = io::dims(vace.get());
      check_vace_dims(ld, vd, fail);
      if (const Stored stored = stored_of(path, vace.get(), "/vace_context"); stored != info.shape.latents)
        throw fail(fmt::format("/vace_context is {} but /latents {}: /vace_context is stored as /latents is",
                               to_string(stored), to_string(info.shape.latents)));
      info.shape.vace_channels = static_cast<int64_t>(vd[1]);
      info.shape.vace_references = static_cast<int64_t>(vd[2] - ld[2]);
    }
    const io::Handle len_type = io::dataset_type(lengths.get());
    if (H5Tget_class(len_type.get()) != H5T_INTEGER)
      throw fail("/text_len has an unsupported element type (expected int32)");
    std::vector<int32_t> text_len(info.samples);
    if (info.samples > 0)
      H5_CHECK(H5Dread(lengths.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, text_len.data()));
    for (int64_t i = 0; i < info.samples; ++i)
      if (text_len[i] < 0 || text_len[i] > info.shape.text_len) {
        const auto problem =
            fail(fmt::format("sample {}: text_len {} is outside 0..L={}", i, text_len[i], info.shape.text_len));
        if (!sample_problems) throw problem;
        sample_problems->push_back(problem.what());
      }
    if (io::exists(root, "prompt")) {
      const io::Handle prompt = io::open_dataset(root, "prompt");
      const auto pd = io::dims(prompt.get());
      if (pd.size() != 1 || pd[0] != ld[0])
        throw fail(fmt::format("/prompt has shape {}, expected [{}]", dims_string(pd), ld[0]));
      info.has_prompt = true;
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw fail(fmt::format("unreadable ({})", e.what()));
  }
  return info;
}

void check_shard_unchanged(const ShardInfo& info, hid_t file, hid_t latents, hid_t text, hid_t lengths, hid_t y,
                           hid_t clip_fea, hid_t vace) {
  auto fail = [&](const std::string& what) {
    return Error(
        fmt::format("data: shard {} changed after the run started: {}; the files of a dataset must not change "
                    "while a run reads them",
                    info.path, what));
  };
  const SampleShape& s = info.shape;
  const bool with_clip = s.has_condition() && s.clip_tokens > 0;
  for (const auto& [name, want] :
       {std::pair{"y", s.has_condition()}, {"clip_fea", with_clip}, {"vace_context", s.has_vace()}})
    if (io::exists(file, name) != want) throw fail(fmt::format("/{} {}", name, want ? "is gone" : "was added"));
  if ((y >= 0) != s.has_condition() || (clip_fea >= 0) != with_clip || (vace >= 0) != s.has_vace())
    throw Error("check_shard_unchanged: the condition's datasets are not those of the shard");
  const auto n = static_cast<hsize_t>(info.samples);
  auto h = [](int64_t v) { return static_cast<hsize_t>(v); };
  const std::vector<hsize_t> want_latents{n, h(s.channels), h(s.frames), h(s.height), h(s.width)},
      want_text{n, h(s.text_len), h(s.text_dim)}, want_lengths{n},
      want_y{n, h(s.condition_channels), h(s.frames), h(s.height), h(s.width)},
      want_clip{n, h(s.clip_tokens), h(s.clip_dim)},
      want_vace{n, h(s.vace_channels), h(s.vace_references + s.frames), h(s.height), h(s.width)};
  for (const auto& [name, dataset, want] : {std::tuple{"/latents", latents, &want_latents},
                                            {"/text_emb", text, &want_text},
                                            {"/text_len", lengths, &want_lengths},
                                            {"/y", y, &want_y},
                                            {"/clip_fea", clip_fea, &want_clip},
                                            {"/vace_context", vace, &want_vace}}) {
    if (dataset < 0) continue;  // not in the shard
    if (const auto now = io::dims(dataset); now != *want)
      throw fail(fmt::format("{} is {}, it was {}", name, dims_string(now), dims_string(*want)));
  }
  try {
    if (stored_of(info.path, latents, "/latents") != s.latents || stored_of(info.path, text, "/text_emb") != s.text ||
        (y >= 0 && stored_of(info.path, y, "/y") != s.latents) ||
        (clip_fea >= 0 && stored_of(info.path, clip_fea, "/clip_fea") != s.text) ||
        (vace >= 0 && stored_of(info.path, vace, "/vace_context") != s.latents))
      throw fail("its element types differ");
  } catch (const UsageError& e) {
    throw fail(e.what());
  }
  const io::Handle length_type = io::dataset_type(lengths);
  if (H5Tget_class(length_type.get()) != H5T_INTEGER) throw fail("/text_len is no longer integers");
}

struct ShardWriter::Impl {
  SampleShape shape;
  int64_t samples;
  io::Handle file, latents, text, text_len, prompt, y, clip_fea, vace_context;
  io::Handle latents_mem_type, text_mem_type;  // memory element types, as stored
};

namespace {

// A dataset [samples, dims...] chunked one sample per chunk.
io::Handle create_per_sample(hid_t file, const char* name, hid_t type, int64_t samples,
                             const std::vector<hsize_t>& sample_dims) {
  std::vector<hsize_t> dims{static_cast<hsize_t>(samples)}, chunk{1};
  for (auto d : sample_dims) {
    dims.push_back(d);
    chunk.push_back(d);
  }
  const io::Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  const io::Handle props(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  if (samples > 0) H5_CHECK(H5Pset_chunk(props.get(), static_cast<int>(chunk.size()), chunk.data()));
  // No modification times in the object headers: the same data make the same bytes.
  H5_CHECK(H5Pset_obj_track_times(props.get(), false));
  return io::Handle(H5_CHECK(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT)),
                    H5Dclose);
}

void write_row(hid_t dataset, hid_t mem_type, int64_t index, const void* data) {
  const io::Handle file_space = io::dataset_space(dataset);
  io::select_rows(file_space.get(), static_cast<hsize_t>(index), 1);
  const io::Handle mem_space = io::rows_space(file_space.get(), 1);
  H5_CHECK(H5Dwrite(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data));
}

}  // namespace

ShardWriter::ShardWriter(const std::string& path, const SampleShape& shape, int64_t samples, bool with_prompt)
    : impl_(std::make_unique<Impl>()) {
  if (shape.clip_tokens > 0 && !shape.has_condition())
    throw Error("ShardWriter: clip_fea without y (the CLIP features are part of an image-to-video condition)");
  io::Lock lock(io::library_mutex());
  io::quiet_errors();
  impl_->shape = shape;
  impl_->samples = samples;
  impl_->file = io::create_file(path);
  const hid_t f = impl_->file.get();
  io::write_string_attribute(f, "format", kShardFormat);
  // Version 3 only with a condition, 4 with a VACE context: text-to-video
  // shards stay what they were (an older wantrain reads them, the same data
  // make the same bytes).
  io::write_int_attribute(f, "version",
                          shape.has_vace()        ? kShardVersion
                          : shape.has_condition() ? kConditionedShardVersion
                                                  : kUnconditionedShardVersion);
  impl_->latents_mem_type = hdf5_type(shape.latents);
  impl_->text_mem_type = hdf5_type(shape.text);
  impl_->latents =
      create_per_sample(f, "latents", impl_->latents_mem_type.get(), samples,
                        {hsize_t(shape.channels), hsize_t(shape.frames), hsize_t(shape.height), hsize_t(shape.width)});
  if (shape.latents == Stored::BFloat16) io::write_string_attribute(impl_->latents.get(), "dtype", "bfloat16");
  impl_->text = create_per_sample(f, "text_emb", impl_->text_mem_type.get(), samples,
                                  {hsize_t(shape.text_len), hsize_t(shape.text_dim)});
  if (shape.text == Stored::BFloat16) io::write_string_attribute(impl_->text.get(), "dtype", "bfloat16");
  impl_->text_len = create_per_sample(f, "text_len", H5T_STD_I32LE, samples, {});
  if (with_prompt) {
    const io::Handle str(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    H5_CHECK(H5Tset_size(str.get(), H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(str.get(), H5T_CSET_UTF8));
    impl_->prompt = create_per_sample(f, "prompt", str.get(), samples, {});
  }
  if (shape.has_condition()) {
    impl_->y = create_per_sample(
        f, "y", impl_->latents_mem_type.get(), samples,
        {hsize_t(shape.condition_channels), hsize_t(shape.frames), hsize_t(shape.height), hsize_t(shape.width)});
    if (shape.latents == Stored::BFloat16) io::write_string_attribute(impl_->y.get(), "dtype", "bfloat16");
    if (shape.clip_tokens > 0) {
      impl_->clip_fea = create_per_sample(f, "clip_fea", impl_->text_mem_type.get(), samples,
                                          {hsize_t(shape.clip_tokens), hsize_t(shape.clip_dim)});
      if (shape.text == Stored::BFloat16) io::write_string_attribute(impl_->clip_fea.get(), "dtype", "bfloat16");
    }
  }
  if (shape.has_vace()) {
    impl_->vace_context =
        create_per_sample(f, "vace_context", impl_->latents_mem_type.get(), samples,
                          {hsize_t(shape.vace_channels), hsize_t(shape.vace_references + shape.frames),
                           hsize_t(shape.height), hsize_t(shape.width)});
    if (shape.latents == Stored::BFloat16) io::write_string_attribute(impl_->vace_context.get(), "dtype", "bfloat16");
  }
}

ShardWriter::~ShardWriter() { close(); }

void ShardWriter::write(int64_t index, const at::Tensor& latents, const at::Tensor& text_emb, int32_t text_len,
                        const std::string& prompt, const SampleCondition& condition) {
  const auto& s = impl_->shape;
  if (index < 0 || index >= impl_->samples) throw Error(fmt::format("ShardWriter: sample {} out of range", index));
  if (latents.sizes() != at::IntArrayRef{s.channels, s.frames, s.height, s.width} ||
      text_emb.sizes() != at::IntArrayRef{s.text_len, s.text_dim})
    throw Error("ShardWriter: sample shape does not match the shard's");
  const bool want_clip = s.clip_tokens > 0;
  if (condition.y.defined() != s.has_condition() || condition.clip_fea.defined() != want_clip)
    throw Error(fmt::format("ShardWriter: sample {} has {}y and {}clip_fea but the shard holds y {}, clip_fea {}",
                            index, condition.y.defined() ? "" : "no ", condition.clip_fea.defined() ? "" : "no ",
                            s.condition_string(), s.clip_string()));
  if ((s.has_condition() &&
       condition.y.sizes() != at::IntArrayRef{s.condition_channels, s.frames, s.height, s.width}) ||
      (want_clip && condition.clip_fea.sizes() != at::IntArrayRef{s.clip_tokens, s.clip_dim}))
    throw Error(fmt::format("ShardWriter: sample {}'s condition does not match the shard's y {}, clip_fea {}", index,
                            s.condition_string(), s.clip_string()));
  if (condition.vace_context.defined() != s.has_vace() ||
      (s.has_vace() && condition.vace_context.sizes() !=
                           at::IntArrayRef{s.vace_channels, s.vace_references + s.frames, s.height, s.width}))
    throw Error(fmt::format("ShardWriter: sample {}'s VACE context {} does not match the shard's {}", index,
                            condition.vace_context.defined()
                                ? fmt::format("[{}]", fmt::join(condition.vace_context.sizes(), ","))
                                : "(none)",
                            s.vace_string()));
  const at::Tensor l = latents.to(scalar_type(s.latents)).contiguous();
  const at::Tensor t = text_emb.to(scalar_type(s.text)).contiguous();
  const at::Tensor y = s.has_condition() ? condition.y.to(scalar_type(s.latents)).contiguous() : at::Tensor();
  const at::Tensor c = want_clip ? condition.clip_fea.to(scalar_type(s.text)).contiguous() : at::Tensor();
  const at::Tensor v = s.has_vace() ? condition.vace_context.to(scalar_type(s.latents)).contiguous() : at::Tensor();
  io::Lock lock(io::library_mutex());
  write_row(impl_->latents.get(), impl_->latents_mem_type.get(), index, l.data_ptr());
  write_row(impl_->text.get(), impl_->text_mem_type.get(), index, t.data_ptr());
  write_row(impl_->text_len.get(), H5T_NATIVE_INT32, index, &text_len);
  if (impl_->prompt) {
    const io::Handle str(H5_CHECK(H5Dget_type(impl_->prompt.get())), H5Tclose);
    const char* text = prompt.c_str();
    write_row(impl_->prompt.get(), str.get(), index, &text);
  }
  if (impl_->y) write_row(impl_->y.get(), impl_->latents_mem_type.get(), index, y.data_ptr());
  if (impl_->clip_fea) write_row(impl_->clip_fea.get(), impl_->text_mem_type.get(), index, c.data_ptr());
  if (impl_->vace_context) write_row(impl_->vace_context.get(), impl_->latents_mem_type.get(), index, v.data_ptr());
}

void ShardWriter::keep_first(int64_t samples) {
  if (samples < 0 || samples > impl_->samples)
    throw Error(fmt::format("ShardWriter: cannot keep {} of {} samples", samples, impl_->samples));
  io::Lock lock(io::library_mutex());
  for (const auto* dataset : {&impl_->latents, &impl_->text, &impl_->text_len, &impl_->prompt, &impl_->y,
                              &impl_->clip_fea, &impl_->vace_context}) {
    if (!*dataset) continue;
    const io::Handle space = io::dataset_space(dataset->get());
    std::vector<hsize_t> dims(size_t(H5_CHECK(H5Sget_simple_extent_ndims(space.get()))));
    H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
    dims[0] = hsize_t(samples);
    H5_CHECK(H5Dset_extent(dataset->get(), dims.data()));
  }
  impl_->samples = samples;
}

void ShardWriter::close() {
  if (!impl_ || !impl_->file) return;
  io::Lock lock(io::library_mutex());
  impl_->vace_context.reset();
  impl_->clip_fea.reset();
  impl_->y.reset();
  impl_->prompt.reset();
  impl_->text_len.reset();
  impl_->text.reset();
  impl_->latents.reset();
  impl_->latents_mem_type.reset();
  impl_->text_mem_type.reset();
  impl_->file.reset();
}

}  // namespace wt::data
