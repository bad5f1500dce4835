// The training data as the whole job sees it, when the nodes may hold
// different files: node-local disks, each with part of a dataset.
//
// Collective over the World. The directory is the same path on every node.
//  - Without shard affinity every rank reads every shard, so every rank
//    opens the whole dataset, as on shared storage, and the ranks compare a
//    digest of what they found: a rank that lacks a shard or holds another
//    copy is one line naming the rank, its host and the shard.
//  - With shard affinity rank r reads shards r, r + W, ... of that list; it
//    needs only those, inspects only those, and the ranks exchange what they
//    found. The order, and so the run, is the one shared storage gives.
// Every error is a UsageError raised on every rank (World::agree), so the
// job prints it once and ends with status 2.
#pragma once

#include <string>

#include "wantrain/data/dataset.hpp"
#include "wantrain/distributed/world.hpp"

namespace wt::train {

data::Dataset open_job_dataset(const distributed::World& world, const std::string& directory, bool shard_affinity);

}  // namespace wt::train
