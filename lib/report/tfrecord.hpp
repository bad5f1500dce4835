// TFRecord framing, the container of TensorBoard event files: each record is
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   the data, uint32 masked CRC-32C of the data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt::report {

// `data` framed as one record.
std::string frame_record(const std::string& data);

struct RecordFile {
  std::vector<std::string> records;  // every whole record with valid CRCs, in order
  // Empty when the file ended cleanly; otherwise why reading stopped (a
  // record cut short by a killed writer, or a CRC mismatch), naming the
  // file and byte offset. Records after that point are not returned.
  std::string problem;
};

// Error naming the file when it cannot be read at all.
RecordFile read_records(const std::string& path);

}  // namespace wt::report
