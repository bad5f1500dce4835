// The HDF5 element type of each Stored dtype, as written in shards and as
// read into memory (private to lib/data).
#pragma once

#include "wantrain/io/h5.hpp"
#include "wantrain/data/shard.hpp"

namespace wt::data {
io::Handle hdf5_type(Stored stored);
}
