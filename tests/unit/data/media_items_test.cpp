// A listing's items and, for wandata encode --condition vace, their control
// files: a folder's NAME.control.EXT, NAME.mask.EXT and NAME.ref*.EXT beside
// NAME.EXT, or the vace_* columns of a .csv and keys of a .jsonl.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../common/shards.hpp"
#include "wantrain/data/media_items.hpp"

namespace {

namespace fs = std::filesystem;

void touch(const std::string& path, const std::string& text = "x") { std::ofstream(path) << text; }

}  // namespace

// Without control files asked for, every media file is an item, as before;
// with them, a clip's control parts join its item, in name order, and a
// name that only looks like one (no clip of its stem) stays an item.
TEST(MediaItems, AClipsControlFilesJoinItsItemOnlyWhenAskedFor) {
  const auto dir = wt::testing::fresh_directory("media-items");
  for (const char* name :
       {"walk.mp4", "walk.control.mp4", "walk.mask.webm", "walk.ref.png", "walk.ref2.jpg", "solo.mask.mp4", "run.mp4"})
    touch(dir + "/" + name);
  touch(dir + "/walk.txt", "a walk");
  const auto plain = wt::data::list_media(dir);
  ASSERT_EQ(plain.size(), 7u);
  for (const auto& item : plain) EXPECT_TRUE(item.control.empty() && item.mask.empty() && item.references.empty());

  wt::data::MediaListOptions options;
  options.control_files = true;
  const auto items = wt::data::list_media(dir, options);
  ASSERT_EQ(items.size(), 3u);  // run, solo.mask (no clip named solo), walk
  EXPECT_EQ(items[0].media, dir + "/run.mp4");
  EXPECT_EQ(items[1].media, dir + "/solo.mask.mp4");
  const auto& walk = items[2];
  EXPECT_EQ(walk.media, dir + "/walk.mp4");
  EXPECT_EQ(walk.caption.value_or(""), "a walk");
  EXPECT_EQ(walk.control, dir + "/walk.control.mp4");
  EXPECT_EQ(walk.mask, dir + "/walk.mask.webm");
  EXPECT_EQ(walk.references, (std::vector<std::string>{dir + "/walk.ref.png", dir + "/walk.ref2.jpg"}));
  EXPECT_TRUE(walk.problem.empty());

  // Two masks for one clip: that item's problem.
  touch(dir + "/walk.mask.mp4");
  const auto twice = wt::data::list_media(dir, options);
  EXPECT_EQ(twice[2].problem, "two mask files beside it: " + dir + "/walk.mask.mp4 and " + dir + "/walk.mask.webm");

  // DiffSynth-Studio's metadata.csv columns and the .jsonl keys, relative to the listing.
  touch(dir + "/list.csv",
        "video,prompt,vace_video,vace_video_mask,vace_reference_image\nwalk.mp4,a walk,c.mp4,m.mp4,r.png\n"
        "run.mp4,a run,,,\n");
  const auto csv = wt::data::list_media(dir + "/list.csv");
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_EQ(csv[0].control, dir + "/c.mp4");
  EXPECT_EQ(csv[0].mask, dir + "/m.mp4");
  EXPECT_EQ(csv[0].references, (std::vector<std::string>{dir + "/r.png"}));
  EXPECT_TRUE(csv[1].control.empty() && csv[1].references.empty());
  touch(dir + "/list.jsonl",
        "{\"video_path\": \"walk.mp4\", \"caption\": \"a walk\", \"vace_video\": \"c.mp4\", "
        "\"vace_reference_image\": [\"r.png\", \"s.png\"]}\n");
  const auto jsonl = wt::data::list_media(dir + "/list.jsonl");
  ASSERT_EQ(jsonl.size(), 1u);
  EXPECT_EQ(jsonl[0].control, dir + "/c.mp4");
  EXPECT_EQ(jsonl[0].references, (std::vector<std::string>{dir + "/r.png", dir + "/s.png"}));
}
