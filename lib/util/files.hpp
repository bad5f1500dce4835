// Durable files: what a crash or power loss must not leave half-written.
#pragma once

#include <string>

namespace wt {

// Makes `path` durable: fsync of the file, then of its directory.
void sync_file(const std::string& path);
void sync_directory(const std::string& directory);

// Writes `text` to `path` through a temporary file (`temporary`, in the
// same directory; empty: `path.tmp`): written, fsynced, renamed over
// `path`, directory fsynced; a reader sees the old file or the whole new
// one. Error naming the file when any step fails (the temporary is removed).
void write_file_durably(const std::string& path, const std::string& text, const std::string& temporary = {});

// The whole file as bytes; UsageError naming it when it cannot be read.
std::string read_whole_file(const std::string& path);

// Why `path` cannot be read as a file, in a user's words ("no such file",
// "is a directory, not a file", "cannot be read: Permission denied"), or
// empty when it is a readable file. Called before a library opens it, so
// the user sees the cause rather than the library's message.
std::string unreadable_file_reason(const std::string& path);

}  // namespace wt
