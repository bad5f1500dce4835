// read_csv_table: good files (quoting, CRLF, blanks) read exactly, and every bad
// input is a one-line UsageError naming the file, the line and the column, with
// the expected line and column worked out from the text the test wrote.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "wantrain/data/csv_table.hpp"
#include "wantrain/util/error.hpp"

using wt::data::CsvTable;
using wt::data::read_csv_table;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("wantrain-csv-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

// The UsageError message for reading `path`; a test failure when there is none.
std::string usage_error(const std::string& path) {
  try {
    read_csv_table(path);
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UsageError for " << path;
  return "";
}

// 1-based line on which `needle` (unique in `text`) starts, as an editor counts.
int64_t line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  EXPECT_EQ(text.find(needle, at + 1), std::string::npos) << needle << " is not unique";
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
}

// 1-based position of `cell` among the comma-separated fields of `row` (unquoted).
size_t column_of(const std::string& row, const std::string& cell) {
  size_t column = 1, start = 0;
  while (true) {
    const size_t comma = row.find(',', start);
    if (row.substr(start, comma - start) == cell) return column;
    if (comma == std::string::npos) break;
    start = comma + 1;
    ++column;
  }
  ADD_FAILURE() << cell << " is not a field of " << row;
  return 0;
}

std::string field(const std::string& row, size_t column) {  // 1-based, unquoted
  size_t start = 0;
  for (size_t i = 1; i < column; ++i) start = row.find(',', start) + 1;
  return row.substr(start, row.find(',', start) - start);
}

// Checks that reading `text` fails with `what` on the line holding `bad_row`, at the column of `bad_cell` (when
// given) with that column's header name.
void expect_cell_error(const std::string& text, const std::string& header, const std::string& bad_row,
                       const std::string& bad_cell, const std::string& what) {
  ScratchDir dir;
  const std::string path = dir.write("t.csv", text);
  const std::string message = usage_error(path);
  const size_t column = column_of(bad_row, bad_cell);
  const std::string expected =
      fmt::format("{}: line {}, column {} ({}): {}", path, line_of(text, bad_row), column, field(header, column), what);
  EXPECT_EQ(message, expected);
}

}  // namespace

TEST(CsvTable, ReadsAGoodFile) {
  ScratchDir dir;
  // Quoted header names (one with a comma), CRLF endings, blanks around numbers, a quoted number, blank lines.
  const std::string path =
      dir.write("good.csv", "\"step\",\"loss, train\",lr\r\n 1 , 2.5,1e-3\r\n\r\n2,\t-0.25 ,\" 4E2 \"\r\n\r\n");
  const CsvTable t = read_csv_table(path);
  EXPECT_EQ(t.path, path);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"step", "loss, train", "lr"}));
  EXPECT_EQ(t.rows, 2);
  EXPECT_EQ(t.values, (std::vector<double>{1, 2.5, 1e-3, 2, -0.25, 400}));
}

TEST(CsvTable, LastLineNeedsNoNewlineAndTrailingBlankLinesAreSkipped) {
  ScratchDir dir;
  const CsvTable bare = read_csv_table(dir.write("bare.csv", "a,b\n1,2\n3,4"));
  const CsvTable blank = read_csv_table(dir.write("blank.csv", "a,b\n1,2\n3,4\n\n  \n"));
  EXPECT_EQ(bare.rows, 2);
  EXPECT_EQ(bare.values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(blank.values, bare.values);
}

TEST(CsvTable, SkipsAByteOrderMark) {
  ScratchDir dir;
  const CsvTable t = read_csv_table(dir.write("bom.csv", "\xEF\xBB\xBFx,y\n1,2\n"));
  EXPECT_EQ(t.column("x"), 0);
}

TEST(CsvTable, ReadsAFileLargerThanOneChunk) {
  ScratchDir dir;
  std::string text = "i,sq\r\n";
  for (int i = 0; i < 20000; ++i) text += fmt::format("{},{}\r\n", i, i * i);  // lines cross the 64 KiB chunks
  const CsvTable t = read_csv_table(dir.write("big.csv", text));
  ASSERT_EQ(t.rows, 20000);
  EXPECT_EQ(t.values[2 * 12345 + 1], 12345.0 * 12345.0);
  const std::string bad = "20000,x";
  text += bad + "\r\n";
  const std::string path = dir.write("big_bad.csv", text);
  EXPECT_EQ(usage_error(path),
            fmt::format("{}: line {}, column 2 (sq): 'x' is not a number", path, line_of(text, bad)));
}

TEST(CsvTable, ColumnFindsANameAndListsTheColumnsWhenMissing) {
  ScratchDir dir;
  const std::string path = dir.write("cols.csv", "epoch,loss,lr\n1,2,3\n");
  const CsvTable t = read_csv_table(path);
  EXPECT_EQ(t.column("epoch"), 0);
  EXPECT_EQ(t.column("lr"), 2);
  try {
    t.column("accuracy");
    FAIL() << "no UsageError";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": no column 'accuracy'; the columns are 'epoch', 'loss', 'lr'");
  }
}

TEST(CsvTable, TextIsNotANumber) {
  const std::string header = "x1,x2,x3", bad = "4,abc,6";
  expect_cell_error(header + "\n1,2,3\n\n" + bad + "\n7,8,9\n", header, bad, "abc", "'abc' is not a number");
  // The same with CRLF endings and blank lines before the header.
  expect_cell_error("\r\n\r\n" + header + "\r\n1,2,3\r\n" + bad + "\r\n", header, bad, "abc", "'abc' is not a number");
}

TEST(CsvTable, TextAfterANumberIsNotANumber) {
  const std::string header = "a,b", bad = "1.5x,2";
  expect_cell_error(header + "\n" + bad + "\n", header, bad, "1.5x", "'1.5x' is not a number");
}

TEST(CsvTable, EmptyCellIsNotANumber) {
  const std::string header = "a,b,c", bad = "1,,3";
  expect_cell_error(header + "\n0,0,0\n" + bad + "\n", header, bad, "", "'' is not a number");
}

TEST(CsvTable, NonFiniteNumbersAreErrors) {
  const std::string header = "a,b";
  for (const std::string cell : {"nan", "inf", "-Infinity", "1e999"}) {
    const std::string bad = "1," + cell;
    expect_cell_error(header + "\n0,0\n" + bad + "\n", header, bad, cell, "'" + cell + "' is not a finite number");
  }
}

TEST(CsvTable, WrongFieldCountNamesTheLine) {
  ScratchDir dir;
  for (const std::string bad : {"1,2,3,4,5", "1,2,3", "9"}) {
    const std::string text = "a,b,c,d\n10,20,30,40\n\n" + bad + "\n";
    const std::string path = dir.write("count.csv", text);
    const size_t fields = std::count(bad.begin(), bad.end(), ',') + 1;
    EXPECT_EQ(usage_error(path), fmt::format("{}: line {} has {} field{}, the header has 4", path, line_of(text, bad),
                                             fields, fields == 1 ? "" : "s"));
  }
}

TEST(CsvTable, LineNumbersCountNewlinesInsideQuotedFields) {
  const std::string header = "\"first\nname\",\"second\r\nname\"", bad = "5,oops";
  const std::string text = header + "\n1,\"2\"\n" + bad + "\n";
  ScratchDir dir;
  const std::string path = dir.write("quoted.csv", text);
  EXPECT_EQ(usage_error(path),
            fmt::format("{}: line {}, column 2 (second\\r\\nname): 'oops' is not a number", path, line_of(text, bad)));
}

TEST(CsvTable, EmptyFileAndHeaderOnly) {
  ScratchDir dir;
  for (const std::string text : {"", "\n\n  \r\n"}) {
    const std::string path = dir.write("empty.csv", text);
    EXPECT_EQ(usage_error(path), path + ": empty file: expected a header row of column names");
  }
  const std::string path = dir.write("header.csv", "a,b\n\n");
  EXPECT_EQ(usage_error(path), path + ": no data rows after the header");
}

TEST(CsvTable, MissingFileAndDirectory) {
  ScratchDir dir;
  const std::string missing = dir.path("missing.csv");
  EXPECT_EQ(usage_error(missing), missing + ": cannot open: No such file or directory");
  const std::string folder = dir.path("");
  EXPECT_NE(usage_error(folder).find(folder + ": cannot"), std::string::npos);
}

TEST(CsvTable, BadHeaderNames) {
  ScratchDir dir;
  const std::string empty = dir.write("empty_name.csv", "\na,,c\n1,2,3\n");
  EXPECT_EQ(usage_error(empty), empty + ": line 2, column 2: empty column name");
  const std::string blank = dir.write("blank_name.csv", "a,\"  \"\n1,2\n");
  EXPECT_EQ(usage_error(blank), blank + ": line 1, column 2: empty column name");
  const std::string dup = dir.write("dup.csv", "x,y,\"x\"\n1,2,3\n");
  EXPECT_EQ(usage_error(dup), dup + ": line 1, column 3: duplicate column name 'x' (also column 1)");
}

TEST(CsvTable, UnterminatedQuoteNamesTheLineItStartsOn) {
  ScratchDir dir;
  const std::string bad = "3,\"4";
  const std::string text = "a,b\n1,2\n" + bad + "\n5,6\n";
  const std::string path = dir.write("open.csv", text);
  EXPECT_EQ(usage_error(path), fmt::format("{}: line {}: unterminated quoted field", path, line_of(text, bad)));
}

TEST(CsvTable, MisplacedQuotesAreErrors) {
  ScratchDir dir;
  for (const std::string bad : {"1,2\"3", "\"1\"2,3"}) {
    const std::string text = "a,b\n0,0\n" + bad + "\n";
    const std::string path = dir.write("quote.csv", text);
    EXPECT_EQ(usage_error(path), fmt::format("{}: line {}: a quote inside an unquoted field, or text after a closing "
                                             "quote",
                                             path, line_of(text, bad)));
  }
}

TEST(CsvTable, EveryMessageIsOneLine) {
  ScratchDir dir;
  const std::vector<std::string> bad = {
      "a,b\n1,\"2\nx\"\n",       // a cell holding a newline
      "\"a\nb\",c\n1,x\n",       // a column name holding a newline
      "a,\"\n\"\n1,2\n",         // a column name that is only a newline
      "a,b\n1,2\n3,\"4\n5,6\n",  // an unterminated quote running over lines
      "a,b\r\n1,2,3\r\n",        // wrong field count, CRLF
      "a,b\n1,\"x\r\n\"\n",      // a cell ending in CRLF inside quotes
      "a\n\x01\n",               // a control character
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string path = dir.write(fmt::format("bad{}.csv", i), bad[i]);
    const std::string message = usage_error(path);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find('\r'), std::string::npos) << message;
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  }
}
