// Paths that a folder's own listings name (a weights index's shards, a
// pipeline's components): they must stay inside the folder, so that a
// folder downloaded from anywhere cannot make a program read other files.
#pragma once

#include <filesystem>
#include <string>

namespace wt {

// The folder that what `folder`'s listings name must lie in: the folder
// itself, its symbolic links resolved; or, when it is inside a snapshot of
// a Hugging Face hub cache (HUB/models--ORG--NAME/snapshots/REVISION/...),
// that model's cache folder HUB/models--ORG--NAME, whose blobs/ hold the
// files that the snapshot's symbolic links point to.
std::filesystem::path listing_root(const std::string& folder);

// Empty when `name`, as a listing in `folder` names it (relative to the
// folder), stays inside it: not absolute, no `..` out of it, and its
// target, symbolic links followed, inside listing_root(`within`, by default
// the folder itself) or a file of a Hugging Face hub cache's blob store
// (models--ORG--NAME/blobs/, where `huggingface-cli download --local-dir`
// of huggingface_hub < 0.23 links a folder's files). Else why not, in a
// user's words. A name that does not exist is judged by the part that does.
std::string outside_folder_reason(const std::string& folder, const std::string& name, const std::string& within = {});

}  // namespace wt
