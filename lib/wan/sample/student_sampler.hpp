// A few-step student's own sampler (wantrain --mode distill --distill-steps
// K): the solver, steps, shift and sigmas it was trained to sample with, at
// guidance 1. The run's checkpoints record it in their objective state,
// and the weights files the run and `wantrain export` write (model, EMA,
// LoRA) in their safetensors metadata, under the same keys, so that
// wansample samples a student as trained wherever its file goes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/model/flow_solver.hpp"

namespace wt::wan {

struct StudentSampler {
  Solver solver = Solver::Euler;
  int steps = 4;
  double shift = 5.0;
  std::vector<double> sigmas;  // steps + 1, from 1 down to 0: what `solver` at `steps` and `shift` steps on
};

// The keys (sampler_solver, sampler_steps, sampler_shift, sampler_sigmas)
// of a checkpoint's objective state or a file's metadata; nullopt when
// they are absent. UsageError naming `source` and the key when one is
// malformed, or when the sigmas are not those of the solver's schedule.
std::optional<StudentSampler> student_sampler_from(const std::map<std::string, std::string>& fields,
                                                   const std::string& source);

// The sampler of a weights file (its metadata; a diffusers folder or a
// .pth has none) or of a checkpoint (its objective state).
std::optional<StudentSampler> student_sampler_of_weights(const std::string& path);
std::optional<StudentSampler> student_sampler_of_checkpoint(const std::string& path);

// Those keys of `fields` (a few-step objective's state), for a file's metadata.
std::map<std::string, std::string> student_sampler_fields(const std::map<std::string, std::string>& fields);

// "euler, 4 steps at shift 20 (sigmas 1, 0.98, 0.95, 0.87, 0)".
std::string describe(const StudentSampler& sampler);

}  // namespace wt::wan
