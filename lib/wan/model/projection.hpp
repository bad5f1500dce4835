// Starting a student from a teacher's weights by projection
// (`wantrain --mode distill --student-init projection`). For each student
// parameter, by official Wan name:
//
//   blocks   student block i of Ls <- teacher block round(i*(Lt-1)/(Ls-1)) of
//            Lt (first and last kept, the rest evenly spread; Ls = 1 takes 0)
//   width    a smaller dim or ffn_dim takes the leading rows/columns; the six
//            modulation chunks of time_projection.1 are sliced chunk by chunk
//   frames   an image student (temporal patch 1) of a video teacher (temporal
//            patch pt > 1): patch_embedding's kernel is summed over time (an
//            image embeds as a still video of pt frames would), head.head's
//            rows are averaged over the teacher's pt output frames
//   missing  a parameter the teacher lacks (norm_q/norm_k or norm3 when only
//            the student has qk_norm / cross_attn_norm) keeps its fresh init
//
// A student identical in shape to the teacher is an exact copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/io/safetensors.hpp"     // NamedTensors
#include "wantrain/wan/model/weights.hpp"  // TensorSource

namespace wt::wan {

// The teacher block that student block `i` of `student_layers` starts from.
int64_t teacher_block_for(int64_t i, int64_t student_layers, int64_t teacher_layers);

// UsageError naming the student config, the field and both values when a
// student cannot be projected from the teacher: another latent space
// (in_dim, out_dim), text encoder (text_dim), time embedding (freq_dim) or
// spatial patch; a temporal patch other than the teacher's or 1; or a
// larger dim, ffn_dim or num_layers than the teacher's.
void check_projectable(const WanConfig& teacher, const std::string& teacher_source, const WanConfig& student,
                       const std::string& student_source);

enum class Projection { Copied, Sliced, Summed, Fresh };

struct ProjectedTensor {
  std::string name;    // the student's parameter
  std::string source;  // the teacher's tensor it came from ("" when Fresh)
  Projection how = Projection::Fresh;
  std::string detail;  // e.g. "[64,64] -> [32,32]"
};

struct ProjectionReport {
  std::vector<int64_t> block_map;  // student block i <- teacher block block_map[i]
  std::vector<ProjectedTensor> tensors;

  int64_t count(Projection how) const;
  // What a user reads at start-up: the block map, then each kind with the
  // tensors it applied to (block numbers folded: blocks.*.ffn.0.weight x 3).
  std::string describe() const;
};

// Overwrites every tensor of `student` (its parameters, official names)
// from `teacher` (official names, any floating dtype) by the rules above,
// reading only the teacher tensors it takes, one at a time. Call
// check_projectable first; a teacher tensor whose shape breaks the rules
// is a UsageError naming it.
ProjectionReport project_weights(const TensorSource& teacher, const WanConfig& teacher_config,
                                 const io::NamedTensors& student, const WanConfig& student_config);
// The same from tensors in memory (any device).
ProjectionReport project_weights(const io::NamedTensors& teacher, const WanConfig& teacher_config,
                                 const io::NamedTensors& student, const WanConfig& student_config);

}  // namespace wt::wan
