// What a folder's own listings may name: paths that stay inside the folder
// (or, in a Hugging Face hub cache, inside the model's cache folder), with
// `..` and symbolic links followed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "wantrain/util/folder_paths.hpp"

namespace folder_paths_test {
namespace {

namespace fs = std::filesystem;

class FolderPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("wantrain-folder-paths-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model" / "sub");
    touch(dir_ / "model" / "a.safetensors");
    touch(dir_ / "model" / "sub" / "b.safetensors");
    touch(dir_ / "outside.safetensors");
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void touch(const fs::path& file) { std::ofstream(file) << "x"; }
  std::string model() const { return (dir_ / "model").string(); }
  fs::path dir_;
};

}  // namespace

TEST_F(FolderPaths, NamesInsideTheFolderAreAccepted) {
  EXPECT_EQ(wt::outside_folder_reason(model(), "a.safetensors"), "");
  EXPECT_EQ(wt::outside_folder_reason(model(), "sub/b.safetensors"), "");
  EXPECT_EQ(wt::outside_folder_reason(model(), "sub/../a.safetensors"), "");
  EXPECT_EQ(wt::outside_folder_reason(model(), "not-there-yet.safetensors"), "");  // judged by the folder it is in
  EXPECT_EQ(wt::outside_folder_reason(model() + "/", "a.safetensors"), "");
  EXPECT_EQ(wt::outside_folder_reason(model() + "/sub/..", "a.safetensors"), "");
  EXPECT_NE(wt::outside_folder_reason(model() + "/", "../outside.safetensors"), "");
}

TEST_F(FolderPaths, NamesThatLeaveTheFolderAreRefusedWithWhereTheyLead) {
  EXPECT_EQ(wt::outside_folder_reason(model(), "../outside.safetensors"),
            "../outside.safetensors leads out of " + model());
  EXPECT_NE(wt::outside_folder_reason(model(), "sub/../../outside.safetensors"), "");
  EXPECT_NE(wt::outside_folder_reason(model(), "../../../../../../../../etc/passwd"), "");
  const std::string absolute = (dir_ / "model" / "a.safetensors").string();  // even one inside: a listing names
  EXPECT_NE(wt::outside_folder_reason(model(), absolute).find("is an absolute path"), std::string::npos);
  EXPECT_NE(wt::outside_folder_reason(model(), ".."), "");
}

TEST_F(FolderPaths, SymbolicLinksAreFollowedBeforeTheCheck) {
  fs::create_symlink(dir_ / "outside.safetensors", dir_ / "model" / "link.safetensors");
  EXPECT_EQ(wt::outside_folder_reason(model(), "link.safetensors"),
            "link.safetensors resolves to " + (fs::canonical(dir_) / "outside.safetensors").string() + ", outside " +
                fs::canonical(dir_ / "model").string());
  fs::create_directory_symlink(dir_, dir_ / "model" / "up");
  EXPECT_NE(wt::outside_folder_reason(model(), "up/outside.safetensors"), "");
  fs::create_symlink("a.safetensors", dir_ / "model" / "alias.safetensors");  // a link inside stays inside
  EXPECT_EQ(wt::outside_folder_reason(model(), "alias.safetensors"), "");
  // A folder given through a link: its files are judged against the folder it leads to.
  fs::create_directory_symlink(dir_ / "model", dir_ / "model-link");
  EXPECT_EQ(wt::outside_folder_reason((dir_ / "model-link").string(), "a.safetensors"), "");
  EXPECT_NE(wt::outside_folder_reason((dir_ / "model-link").string(), "../outside.safetensors"), "");
}

TEST_F(FolderPaths, AHuggingFaceHubSnapshotMayLinkIntoItsModelsBlobs) {
  // huggingface_hub's cache: snapshots/REV/<files> are links to ../../blobs/<hash>.
  const fs::path repo = dir_ / "hub" / "models--Wan-AI--Wan2.1-T2V-1.3B-Diffusers";
  const fs::path snapshot = repo / "snapshots" / "0123abcd" / "transformer";
  fs::create_directories(snapshot);
  fs::create_directories(repo / "blobs");
  touch(repo / "blobs" / "9f86d081");
  fs::create_symlink("../../../blobs/9f86d081", snapshot / "diffusion_pytorch_model.safetensors");
  EXPECT_EQ(wt::listing_root(snapshot.string()), fs::canonical(repo));
  EXPECT_EQ(wt::outside_folder_reason(snapshot.string(), "diffusion_pytorch_model.safetensors"), "");
  // ... but not out of the model's cache folder.
  fs::create_symlink("../../../../../outside.safetensors", snapshot / "escape.safetensors");
  EXPECT_NE(wt::outside_folder_reason(snapshot.string(), "escape.safetensors"), "");
  // A folder elsewhere whose files link into a hub cache's blobs (huggingface_hub < 0.23's --local-dir).
  fs::create_symlink(repo / "blobs" / "9f86d081", dir_ / "model" / "from-the-hub.safetensors");
  EXPECT_EQ(wt::outside_folder_reason(model(), "from-the-hub.safetensors"), "");
  // A folder's files checked against the pipeline root that holds it (a git-annex checkout links into ROOT/.git).
  fs::create_directories(dir_ / "model" / ".git" / "annex");
  touch(dir_ / "model" / ".git" / "annex" / "object");
  fs::create_symlink("../.git/annex/object", dir_ / "model" / "sub" / "annexed.safetensors");
  EXPECT_NE(wt::outside_folder_reason(model() + "/sub", "annexed.safetensors"), "");
  EXPECT_EQ(wt::outside_folder_reason(model() + "/sub", "annexed.safetensors", model()), "");
  // A folder named like it elsewhere is only its own root.
  EXPECT_EQ(wt::listing_root(model()), fs::canonical(dir_ / "model"));
}

}  // namespace folder_paths_test
