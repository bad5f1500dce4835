// Command-line and INI options, each declared once.
//
// An option is declared with its name, the field it fills, and its help; its
// default is the field's value at declaration. The same names are read from
// the command line and from the INI file named by --config ("lr = 1e-4");
// the command line wins. Help text is generated from the declarations, so it
// cannot drift from what the parser reads, and so is the resolved table that
// rank 0 prints at start-up.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace wt {

// Sizes written as `form` says ("HxW", "FxHxW": one number per letter),
// each from 1 to 2^20; a UsageError naming `option` and quoting `example`
// otherwise.
std::vector<int64_t> parse_sizes(const std::string& text, const std::string& form, const char* example,
                                 const char* option);
// "HxW" (e.g. --size 32x32) as {height, width}.
std::pair<int64_t, int64_t> parse_height_width(const std::string& text, const char* option);

class OptionSet {
 public:
  // `program` and `usage` head the --help text, e.g. "wantrain", "[options]".
  OptionSet(std::string program, std::string usage);

  // Starts a new group of options under `caption` in --help.
  OptionSet& group(const std::string& caption);

  // A valued option: --name VALUE, or "name = VALUE" in the INI file.
  template <class T>
  OptionSet& add(const char* name, T* field, const char* help) {
    auto value = boost::program_options::value<T>(field)->default_value(*field, to_text(*field));
    value->value_name(std::is_integral_v<T> ? "N" : std::is_floating_point_v<T> ? "X" : "VALUE");
    return add_described(name, value, help, [field] { return to_text(*field); });
  }

  // A switch: --name (or --name=false) on the command line, "name = true|false" in the INI file.
  OptionSet& flag(const char* name, bool* field, const char* help);

  // A string option whose value must be one of `allowed`.
  OptionSet& choice(const char* name, std::string* field, std::vector<std::string> allowed, const char* help);

  // A valued option that may be given several times (--name A --name B),
  // collected in order.
  OptionSet& repeated(const char* name, std::vector<std::string>* values, const char* help);

  // Operands after the options (e.g. `wandata verify DIR`): up to `max`
  // (-1: any number) collected into `values`, also accepted as --name VALUE.
  OptionSet& positional(const char* name, std::vector<std::string>* values, const char* help, int max = -1);

  // Adds --config FILE (the INI file), --help and --version.
  OptionSet& standard_options(std::string* config_file);

  enum class Outcome { Run, Help, Version };

  // Parses the command line, then the INI file named by --config. Fills the
  // fields, or throws UsageError naming the option or file. argv[0] is skipped.
  Outcome parse(int argc, const char* const* argv);

  std::string help_text() const;
  const std::string& program() const { return program_; }

  struct Resolved {
    std::string group, name, value, source;  // source: "default", "command line" or the INI file name
  };
  // Every option's value after parse(), in declaration order.
  std::vector<Resolved> resolved() const;

  // Renders resolved() as an aligned table, one option a line, grouped.
  std::string resolved_table() const;

  // The setting -> option map a tool hands set_option_names
  // (util/error.hpp), derived from the options it declared: each option
  // sets the library's setting of its name with dashes as underscores
  // ("comm-timeout" -> "comm_timeout"); `renames` add settings that a tool's
  // option names otherwise ({"step", "bucket-step"}). So a library setting
  // means the same wherever a tool has an option of its name.
  std::map<std::string, std::string> setting_names(const std::map<std::string, std::string>& renames = {}) const;

  template <class T>
  static std::string to_text(const T& value) {
    std::ostringstream out;
    out << std::boolalpha << value;
    return out.str();
  }

 private:
  struct Declared {
    std::string group, name;
    std::function<std::string()> current;
    std::vector<std::string> choices;
    std::string* choice_field = nullptr;
  };

  OptionSet& add_described(const char* name, const boost::program_options::value_semantic* value, const char* help,
                           std::function<std::string()> current);
  boost::program_options::options_description& current_group();

  std::string program_, usage_;
  std::vector<std::unique_ptr<boost::program_options::options_description>> groups_;
  std::vector<std::string> captions_;  // of groups_
  std::vector<Declared> declared_;
  std::string* config_file_ = nullptr;
  boost::program_options::positional_options_description positional_;
  boost::program_options::variables_map sources_cli_, sources_all_;
  std::string config_name_;
};

}  // namespace wt
