#include "wantrain/wan/model/projection.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <map>
#include <regex>

#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

std::string shape_string(at::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ",")); }

const std::regex& block_name() {
  static const std::regex re(R"(^blocks\.(\d+)\.(.*)$)");
  return re;
}

// Leading slice of `t` to `shape` on every axis; UsageError when an axis would grow.
at::Tensor slice_leading(at::Tensor t, at::IntArrayRef shape, const std::string& name) {
  if (t.dim() != int64_t(shape.size()))
    throw UsageError(fmt::format("teacher tensor {} is {}; the student's is {}", name, shape_string(t.sizes()),
                                 shape_string(shape)));
  for (int64_t axis = 0; axis < t.dim(); ++axis) {
    if (shape[axis] > t.size(axis))
      throw UsageError(fmt::format("teacher tensor {} is {}: too small for the student's {}", name,
                                   shape_string(t.sizes()), shape_string(shape)));
    if (shape[axis] < t.size(axis)) t = t.narrow(axis, 0, shape[axis]);
  }
  return t;
}

}  // namespace

int64_t teacher_block_for(int64_t i, int64_t student_layers, int64_t teacher_layers) {
  if (student_layers <= 1) return 0;
  // round(i*(Lt-1)/(Ls-1)), half up, in integers.
  const int64_t numerator = 2 * i * (teacher_layers - 1) + (student_layers - 1);
  return numerator / (2 * (student_layers - 1));
}

void check_projectable(const WanConfig& t, const std::string& teacher_source, const WanConfig& s,
                       const std::string& student_source) {
  auto fail = [&](const std::string& field, const std::string& theirs, const std::string& ours,
                  const std::string& why) {
    throw SettingError("student_init", fmt::format("projection: student {} has {} {}, teacher {} has {}: {}",
                                                   student_source, field, ours, teacher_source, theirs, why));
  };
  auto same = [&](const char* field, int64_t teacher_value, int64_t student_value, const char* why) {
    if (teacher_value != student_value) fail(field, std::to_string(teacher_value), std::to_string(student_value), why);
  };
  auto not_larger = [&](const char* field, int64_t teacher_value, int64_t student_value) {
    if (student_value > teacher_value)
      fail(field, std::to_string(teacher_value), std::to_string(student_value),
           "a student may be smaller than its teacher, not larger (or start it at random)");
  };
  same("in_dim", t.in_dim, s.in_dim, "both must read the same latents");
  same("out_dim", t.out_dim, s.out_dim, "both must predict the same latents");
  same("text_dim", t.text_dim, s.text_dim, "both must read the same text embeddings");
  same("freq_dim", t.freq_dim, s.freq_dim, "the sinusoidal time embedding would change meaning");
  if (t.model_type != s.model_type && (t.image_conditioned() || s.image_conditioned()))
    fail("model_type", model_type_name(t.model_type), model_type_name(s.model_type),
         "both must read the same image condition");
  same("image_dim", t.image_dim, s.image_dim, "both must read the same CLIP features");
  if (s.patch_size[1] != t.patch_size[1] || s.patch_size[2] != t.patch_size[2])
    fail("patch_size", fmt::format("{}", t.patch_size), fmt::format("{}", s.patch_size),
         "the spatial patch (height, width) must be the teacher's");
  if (s.patch_size[0] != t.patch_size[0] && s.patch_size[0] != 1)
    fail("patch_size", fmt::format("{}", t.patch_size), fmt::format("{}", s.patch_size),
         "the temporal patch must be the teacher's, or 1 for an image student");
  not_larger("dim", t.dim, s.dim);
  not_larger("ffn_dim", t.ffn_dim, s.ffn_dim);
  not_larger("num_layers", t.num_layers, s.num_layers);
}

ProjectionReport project_weights(const io::NamedTensors& teacher, const WanConfig& tc, const io::NamedTensors& student,
                                 const WanConfig& sc) {
  return project_weights(tensors_source(teacher, "the teacher"), tc, student, sc);
}

ProjectionReport project_weights(const TensorSource& teacher, const WanConfig& tc, const io::NamedTensors& student,
                                 const WanConfig& sc) {
  ProjectionReport report;
  for (int64_t i = 0; i < sc.num_layers; ++i)
    report.block_map.push_back(teacher_block_for(i, sc.num_layers, tc.num_layers));
  const int64_t pt = tc.patch_size[0], ps = sc.patch_size[0];
  torch::NoGradGuard no_grad;
  for (const auto& [name, target] : student) {
    ProjectedTensor entry;
    entry.name = name;
    std::smatch match;
    entry.source = std::regex_match(name, match, block_name())
                       ? fmt::format("blocks.{}.{}", report.block_map.at(std::stoul(match[1])), match[2].str())
                       : name;
    const auto found = teacher.shapes.find(entry.source);
    if (found == teacher.shapes.end()) {
      entry.source.clear();
      entry.detail = "the teacher has no such tensor";
      report.tensors.push_back(std::move(entry));
      continue;
    }
    const at::Tensor read = teacher.read(entry.source);
    at::Tensor t = read.detach().to(torch::kCPU, torch::kFloat32);
    bool summed = false;
    if (pt != ps && name == "patch_embedding.weight" && t.dim() == 5 && t.size(2) == pt) {
      t = t.sum(2, /*keepdim=*/true);  // [dim, C, 1, ph, pw]
      summed = true;
    } else if (pt != ps && (name == "head.head.weight" || name == "head.head.bias") && t.size(0) % pt == 0) {
      // Rows are (frame, ph, pw, channel) with the frame outermost: average the frames.
      auto rows = t.unflatten(0, {pt, t.size(0) / pt});
      t = rows.mean(0);
      summed = true;
    }
    const auto before = t.sizes().vec();
    if (name == "time_projection.1.weight" || name == "time_projection.1.bias") {
      // Six stacked chunks of dim rows (shift, scale, gate of two branches): slice each.
      auto chunks = t.unflatten(0, {6, t.size(0) / 6});
      std::vector<int64_t> chunk_shape{6, sc.dim};
      if (t.dim() == 2) chunk_shape.push_back(sc.dim);
      t = slice_leading(chunks, chunk_shape, entry.source).flatten(0, 1);
    } else {
      t = slice_leading(t, target.sizes(), entry.source);
    }
    if (t.sizes() != target.sizes())
      throw UsageError(fmt::format("teacher tensor {} is {}; the student's {} is {}", entry.source,
                                   shape_string(read.sizes()), name, shape_string(target.sizes())));
    const bool sliced = before != target.sizes().vec();
    entry.how = summed ? Projection::Summed : sliced ? Projection::Sliced : Projection::Copied;
    if (summed || sliced)
      entry.detail = fmt::format("{} -> {}", shape_string(read.sizes()), shape_string(target.sizes()));
    target.copy_(t);
    report.tensors.push_back(std::move(entry));
  }
  return report;
}

int64_t ProjectionReport::count(Projection how) const {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.how == how;
  return n;
}

std::string ProjectionReport::describe() const {
  std::string out;
  if (!block_map.empty()) {
    std::vector<std::string> pairs;
    for (size_t i = 0; i < block_map.size(); ++i) pairs.push_back(fmt::format("{}<-{}", i, block_map[i]));
    out += fmt::format("  blocks (student<-teacher): {}\n", fmt::join(pairs, " "));
  }
  const std::pair<Projection, const char*> kinds[] = {{Projection::Copied, "copied"},
                                                      {Projection::Sliced, "sliced (leading rows/columns)"},
                                                      {Projection::Summed, "summed/averaged over the teacher's frames"},
                                                      {Projection::Fresh, "freshly initialised"}};
  for (const auto& [how, label] : kinds) {
    // Fold block numbers: one line per tensor kind, with how many blocks share it.
    std::map<std::string, std::pair<int, std::string>> folded;
    std::vector<std::string> order;
    for (const auto& t : tensors) {
      if (t.how != how) continue;
      static const std::regex block_prefix(R"(^blocks\.\d+\.)");
      const std::string key = std::regex_replace(t.name, block_prefix, "blocks.*.");
      auto [it, inserted] = folded.emplace(key, std::pair{0, t.detail});
      if (inserted) order.push_back(key);
      ++it->second.first;
    }
    out += fmt::format("  {}: {} tensor{}\n", label, count(how), count(how) == 1 ? "" : "s");
    for (const auto& key : order) {
      const auto& [n, detail] = folded[key];
      out += fmt::format("    {}{}{}\n", key, n > 1 ? fmt::format(" x {}", n) : std::string(),
                         detail.empty() ? std::string() : "  " + detail);
    }
  }
  return out;
}

}  // namespace wt::wan
