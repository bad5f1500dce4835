// Parameter names of the official Wan checkpoints <-> the diffusers
// WanTransformer3DModel names, from one table of rules.
#pragma once

#include <string>
#include <vector>

namespace wt::model {

// The official name of a diffusers name (unchanged when no rule matches).
std::string official_name(const std::string& diffusers_name);
// The diffusers name of an official name (unchanged when no rule matches).
std::string diffusers_name(const std::string& official_name);
// Whether a set of tensor names uses diffusers naming.
bool uses_diffusers_names(const std::vector<std::string>& names);

}  // namespace wt::model
