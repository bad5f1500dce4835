// `wantrain export`: a checkpoint's weights (or EMA) as safetensors.
#pragma once

namespace wt {
class World;

int run_export(World& world, int argc, char** argv);

}  // namespace wt
