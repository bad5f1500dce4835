// Parameter names of the official Wan checkpoints <-> the diffusers
// WanTransformer3DModel names, from one table of rules.
#pragma once

#include <string>
#include <vector>

namespace wt::wan {

// The official name of a diffusers name (unchanged when no rule matches).
std::string official_name(const std::string& diffusers_name);
// The diffusers name of an official name (unchanged when no rule matches).
std::string diffusers_name(const std::string& official_name);
// Whether a set of tensor names uses diffusers naming.
bool uses_diffusers_names(const std::vector<std::string>& names);

// Every Linear layer of a Wan block by its official name within the block:
// self_attn.{q,k,v,o}, cross_attn.{q,k,v,o}, ffn.0, ffn.2, and the image
// branch's cross_attn.{k_img,v_img} (Wan2.1 I2V/FLF2V only).
const std::vector<std::string>& block_linear_names();
// The block Linear an official parameter name belongs to
// ("blocks.3.self_attn.q.weight" -> "self_attn.q"); "" for any other parameter.
std::string block_linear(const std::string& official_name);

// Whether a teacher held in bf16 (Teacher(..., kBFloat16)) holds this
// parameter (official name) in bf16: the Linears of the blocks and of the
// text embedding.
bool held_in_bf16_by_teacher(const std::string& official_name);

}  // namespace wt::wan
