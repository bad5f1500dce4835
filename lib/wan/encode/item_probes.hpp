// What each item of a `wandata encode` listing is, before any is decoded:
// its caption checked and its header probed (size, frame count at the
// frame rate), the facts its buckets are chosen from (wan/encode/encode_plan.hpp).
//
// Probing reads every packet of a video, so the ranks share it: rank r
// probes items r, r + N, r + 2N, ... and the probes are gathered, in
// listing order, on every rank. Rank 0 keeps them in OUT/items.json; a
// resumed job reads them back instead of probing again, so that its plan,
// and its shards, stay the first run's (an item is probed again when it is
// decoded, and skipped if it changed). It refuses a listing that changed
// meanwhile (another item count or another file at a position).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "wantrain/data/media_items.hpp"
#include "wantrain/media/media_reader.hpp"
#include "wantrain/wan/encode/encode_plan.hpp"

namespace wt::distributed {
class World;
}

namespace wt::wan {

// Why an item's caption cannot be used ("no caption", "its caption is not
// UTF-8", ...), or why the listing entry is unusable; empty when it can.
std::string caption_problem(const data::MediaItem& item);

// A media error without the path that the item's origin already names.
std::string without_path(const std::string& message, const std::string& path);

// Collective over `world`: the probes a job began with (OUT/items.json),
// when `out` holds them; UsageError when the listing differs from theirs.
std::optional<std::vector<ItemProbe>> recorded_probes(const std::vector<data::MediaItem>& items, const std::string& out,
                                                      distributed::World& world);

// Collective over `world`: every item's probe, in listing order. `fps` as
// the encode's frame selection (0: the source's rate).
std::vector<ItemProbe> probe_items(const std::vector<data::MediaItem>& items, const media::MediaLimits& limits,
                                   double fps, distributed::World& world);

// Writes OUT/items.json (rank 0, once the probes are accepted).
void record_probes(const std::vector<data::MediaItem>& items, const std::vector<ItemProbe>& probes,
                   const std::string& out);

}  // namespace wt::wan
