// Fun-Control V1.1 data with a reference frame (wandata encode --condition
// fun-control-ref), and the condition a model is shown from them.
//
// VideoX-Fun trains its V1.1 models (scripts/wan2.1_fun/train_control.py
// with --train_mode control_ref --control_ref_image random
// --add_full_ref_image_in_self_attention) with one picture of the clip a
// step: the first frame with probability 0.4, else another frame drawn
// uniformly. The first frame is the start (y's start channels, full_ref
// zeros); another frame is the reference (y's start channels zeros,
// full_ref its latents); CLIP reads the picture chosen. The data hold both
// pictures of each sample, so that a step can show either:
//
//   y        [3 z, F, H, W] = [control latents, the start's latent frame
//            (frame 0, zeros after), the reference's latent frame (frame 0,
//            zeros after)]: each picture alone through the VAE, as
//            train_control.py encodes them (its ref_latents_conv_in)
//   clip_fea [2 T, D] = [the start's CLIP features, the reference's]
//
// pick_reference turns that into what the model reads: y [2 z, F, H, W],
// full_ref [z, H, W], clip_fea [T, D].
#pragma once

#include <cstdint>
#include <vector>

#include "wantrain/wan/model/model_condition.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

// From `data` (batched: y [B, 3 z, F, H, W], clip_fea [B, 2 T, D] or
// undefined), per row: `other` shows the reference frame (else the start),
// and `reference_dropped` zeroes the reference's latents where it is shown
// (train_control.py's 10% draw). full_ref stays undefined (the model reads
// zeros) when no row shows the reference. Empty vectors: every row shows
// the start (validation, samples from the data).
ModelCondition pick_reference(const ModelCondition& data, int64_t z, const std::vector<bool>& other = {},
                              const std::vector<bool>& reference_dropped = {});

// What `config`'s model reads of a condition from the data: with a
// reference frame (y of config.reference_y_channels()), the start, as
// validation and the samples drawn from the data show it; otherwise the
// condition as it is.
ModelCondition shown_condition(const ModelCondition& data, const WanConfig& config);

}  // namespace wt::wan
