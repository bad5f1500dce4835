// HDF5 details of shards shared by the shard reader and writer (private to
// lib/data): the element type of each Stored dtype, as written and as read.
#pragma once

#include "wantrain/io/h5.hpp"
#include "wantrain/data/shard.hpp"

namespace wt::data {
io::Handle hdf5_type(Stored stored);

// For a shard opened again after inspect_shard (the reader opens each file
// when it first needs it): throws Error naming the file when its datasets'
// shapes or element types are no longer `info`'s, or /y, /clip_fea or
// /vace_context came or went, before anything is read into buffers sized
// from `info`. `y`, `clip_fea` and `vace` are the shard's condition
// datasets, H5I_INVALID_HID where `info` has none. The caller holds the
// HDF5 lock.
void check_shard_unchanged(const ShardInfo& info, hid_t file, hid_t latents, hid_t text, hid_t lengths, hid_t y,
                           hid_t clip_fea, hid_t vace);
}  // namespace wt::data
