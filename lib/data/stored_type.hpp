// The HDF5 element type of each Stored dtype, as written in shards and as
// read into memory (private to lib/data).
#pragma once

#include "data/h5.hpp"
#include "data/shard.hpp"

namespace wt::data {
h5::Handle hdf5_type(Stored stored);
}
