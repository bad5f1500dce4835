#include "wantrain/data/csv_table.hpp"

#include <csv.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string_view>

#include "wantrain/util/error.hpp"

namespace wt::data {

namespace {

// Text as a message shows it: cut short, control characters escaped so the message stays one line.
std::string escaped(const std::string& s) {
  constexpr size_t kMax = 40;
  std::string out;
  for (const char c : s.substr(0, kMax)) {
    const auto u = static_cast<unsigned char>(c);
    out += c == '\n'               ? "\\n"
           : c == '\r'             ? "\\r"
           : u < 0x20 || u == 0x7f ? fmt::format("\\x{:02x}", u)
                                   : std::string(1, c);
  }
  return s.size() > kMax ? out + "..." : out;
}

std::string shown(const std::string& s) { return "'" + escaped(s) + "'"; }

// libcsv trims blanks around unquoted fields only; quoted ones (which may hold line ends) are trimmed here.
std::string trimmed(const std::string& s) {
  constexpr const char* kSpace = " \t\r\n\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  return begin == std::string::npos ? std::string() : s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// State shared with libcsv's callbacks, which see no positions: the bytes are fed a line at a time, so `line` is the
// line they are called on.
struct Parse {
  explicit Parse(CsvText& t) : table(t) {}

  CsvText& table;
  int64_t line = 1;         // line of the bytes being fed
  int64_t record_line = 0;  // line on which the current record starts
  bool in_record = false;
  bool header_done = false;
  std::vector<std::string> fields;
  std::exception_ptr failure;  // the first error; later input is ignored

  [[noreturn]] void fail(const std::string& what) const { throw UsageError(fmt::format("{}: {}", table.path, what)); }

  void begin_record() {
    in_record = true;
    record_line = line;
  }

  void add_field(const char* data, size_t size) {
    if (!in_record) begin_record();  // only after a lone CR ended a record mid-line; feed() sees all other starts
    fields.emplace_back(size ? data : "", size);
  }

  void end_record() {
    if (!header_done) {
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string name = trimmed(fields[i]);
        if (name.empty()) fail(fmt::format("line {}, column {}: empty column name", record_line, i + 1));
        for (size_t j = 0; j < i; ++j)
          if (table.columns[j] == name)
            fail(fmt::format("line {}, column {}: duplicate column name {} (also column {})", record_line, i + 1,
                             shown(name), j + 1));
        table.columns.push_back(name);
      }
      header_done = true;
    } else {
      if (fields.size() != table.columns.size())
        fail(fmt::format("line {} has {} field{}, the header has {}", record_line, fields.size(),
                         fields.size() == 1 ? "" : "s", table.columns.size()));
      for (const auto& field : fields) table.cells.push_back(trimmed(field));
      table.lines.push_back(record_line);
    }
    fields.clear();
    in_record = false;
  }
};

// Runs a callback's work. An exception must not unwind through libcsv's C frames, so it is kept and rethrown once
// csv_parse or csv_fini has returned.
template <typename Work>
void guarded(void* state, Work&& work) {
  auto& p = *static_cast<Parse*>(state);
  if (p.failure) return;
  try {
    work(p);
  } catch (...) {
    p.failure = std::current_exception();
  }
}

void on_field(void* data, size_t size, void* state) {
  guarded(state, [&](Parse& p) { p.add_field(static_cast<const char*>(data), size); });
}

void on_record(int /*terminator*/, void* state) {
  guarded(state, [](Parse& p) { p.end_record(); });
}

constexpr const char* kQuoteError = "a quote inside an unquoted field, or text after a closing quote";

void feed(csv_parser& parser, Parse& p, const char* s, size_t n) {
  while (n > 0 && !p.failure) {
    const auto* newline = static_cast<const char*>(std::memchr(s, '\n', n));
    const size_t len = newline ? static_cast<size_t>(newline - s) + 1 : n;
    // libcsv begins a record at anything but blanks and line ends.
    if (!p.in_record && std::string_view(s, len).find_first_not_of(" \t\r\n") != std::string_view::npos)
      p.begin_record();
    if (csv_parse(&parser, s, len, on_field, on_record, &p) != len && !p.failure) {
      const int code = csv_error(&parser);
      // Strict mode's only parse errors; libcsv's own text ("error parsing data while strict checking enabled")
      // does not say what to fix.
      if (code == CSV_EPARSE) p.fail(fmt::format("line {}: {}", p.line, kQuoteError));
      p.fail(fmt::format("line {}: {}", p.line, csv_strerror(code)));
    }
    if (newline) ++p.line;
    s += len;
    n -= len;
  }
}

int64_t find_column(const std::string& path, const std::vector<std::string>& columns, const std::string& name) {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int64_t>(i);
  std::string listed;
  for (const auto& c : columns) listed += (listed.empty() ? "" : ", ") + shown(c);
  throw UsageError(fmt::format("{}: no column {}; the columns are {}", path, shown(name), listed));
}

}  // namespace

int64_t CsvText::column(const std::string& name) const { return find_column(path, columns, name); }
int64_t CsvTable::column(const std::string& name) const { return find_column(path, columns, name); }

CsvText read_csv_text(const std::string& path) {
  CsvText table;
  table.path = path;
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw UsageError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0) throw Error(fmt::format("{}: csv_init failed", path));
  const std::unique_ptr<csv_parser, void (*)(csv_parser*)> free_parser(&parser, &csv_free);

  Parse p(table);
  std::vector<char> chunk(size_t{1} << 16);
  bool first = true;
  while (!p.failure) {
    const size_t got = std::fread(chunk.data(), 1, chunk.size(), file.get());
    if (got == 0) break;
    // A UTF-8 byte order mark (spreadsheets write one) would otherwise join the first column name.
    const size_t skip = first && got >= 3 && std::memcmp(chunk.data(), "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    first = false;
    feed(parser, p, chunk.data() + skip, got - skip);
  }
  if (!p.failure && std::ferror(file.get()))
    throw UsageError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  // With CSV_STRICT_FINI this fails only for a quoted field still open at the end of the file.
  if (!p.failure && csv_fini(&parser, on_field, on_record, &p) != 0 && !p.failure)
    p.fail(fmt::format("line {}: unterminated quoted field", p.record_line));
  if (p.failure) std::rethrow_exception(p.failure);
  if (!p.header_done) p.fail("empty file: expected a header row of column names");
  if (table.rows() == 0) p.fail("no data rows after the header");
  return table;
}

CsvTable read_csv_table(const std::string& path) {
  const CsvText text = read_csv_text(path);
  CsvTable table;
  table.path = path;
  table.columns = text.columns;
  table.rows = text.rows();
  const size_t width = text.columns.size();
  for (size_t k = 0; k < text.cells.size(); ++k) {
    const std::string& cell = text.cells[k];
    const size_t i = k % width;
    const auto where = [&] {
      return fmt::format("{}: line {}, column {} ({})", path, text.lines[k / width], i + 1, escaped(text.columns[i]));
    };
    char* end = nullptr;
    const double value = std::strtod(cell.c_str(), &end);
    if (cell.empty() || end != cell.c_str() + cell.size())
      throw UsageError(fmt::format("{}: {} is not a number", where(), shown(cell)));
    if (!std::isfinite(value)) throw UsageError(fmt::format("{}: {} is not a finite number", where(), shown(cell)));
    table.values.push_back(value);
  }
  return table;
}

at::Tensor CsvTable::columns_tensor(const std::vector<std::string>& names) const {
  auto out = torch::empty({rows, int64_t(names.size())}, torch::kFloat64);
  auto* data = out.data_ptr<double>();
  const size_t width = columns.size();
  for (size_t j = 0; j < names.size(); ++j) {
    const auto c = size_t(column(names[j]));
    for (int64_t i = 0; i < rows; ++i) data[size_t(i) * names.size() + j] = values[size_t(i) * width + c];
  }
  return out;
}

}  // namespace wt::data
