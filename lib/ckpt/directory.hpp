// The checkpoint directory (the run's --output-dir): names, the `latest` and
// `best` links, committing a file durably, pruning.
//
//   step-00000120.h5    complete checkpoints (written as step-....h5.tmp, then renamed)
//   latest -> step-00000120.h5   symlink, replaced atomically by rename
//   best   -> step-00000100.h5   with --keep-best: the lowest validation loss
//   step-00000120.zero-1-of-2.h5  ZeRO-1: rank 1's shard of step-00000120.h5
//                       (shard_file.hpp), pruned and removed with it
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wt::ckpt {

std::string checkpoint_file_name(int64_t step);  // "step-00000120.h5"

// The complete checkpoints in `directory`, oldest step first.
std::vector<std::string> list_checkpoints(const std::string& directory);

// The checkpoint a link (`latest`, `best`) in `directory` names, as a path,
// if the link and its target exist and the target is one of the directory's
// own checkpoints (a bare step-NNNNNNNN.h5, as the writer links it).
std::optional<std::string> linked_checkpoint(const std::string& directory, const std::string& link);

// --resume: "auto" is `latest` in `output_dir` if there is one (else nullopt:
// start fresh); anything else is a checkpoint file, or a directory whose
// `latest` is taken. UsageError naming the option when PATH has none, and
// for a run directory that is damaged rather than new: a `latest` naming a
// missing file or anything but one of its own checkpoints, a `latest` that
// is a file and not a link. Checkpoints without a `latest` (a kill between
// the rename and the link) resume from the newest, with a warning.
std::optional<std::string> resolve_resume(const std::string& resume, const std::string& output_dir);

// Atomically points `directory/link` at `target` (a name in the directory).
void replace_link(const std::string& directory, const std::string& link, const std::string& target);

// Removes the oldest complete checkpoints beyond the newest `keep` (0:
// none), never one that `latest` or `best` names. Returns what it removed.
std::vector<std::string> prune(const std::string& directory, int keep);

// Removes `step-*.h5.tmp` left by a writer that died mid-write, and shard
// files whose checkpoint is missing; returns them.
std::vector<std::string> remove_partial_writes(const std::string& directory);

// One job owns an output directory: an exclusive flock(2) on
// `directory/.wantrain.lock`, held for the object's lifetime, with the
// holder's host and pid written in the file. The kernel releases it when the
// process ends however it ends, so a dead job's lock file is simply taken
// over. A second holder is refused with a SettingError (setting
// "output_dir") naming the directory and the holder. flock is per host on
// some network file systems (old NFS clients): see docs/checkpoint-format.md.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& directory);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace wt::ckpt
