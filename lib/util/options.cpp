#include "wantrain/util/options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/text.hpp"

namespace po = boost::program_options;

namespace wt {

namespace {
std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}
}  // namespace

OptionSet::OptionSet(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

OptionSet& OptionSet::group(const std::string& caption) {
  groups_.push_back(std::make_unique<po::options_description>(caption));
  captions_.push_back(caption);
  return *this;
}

po::options_description& OptionSet::current_group() {
  if (groups_.empty()) group("options");
  return *groups_.back();
}

OptionSet& OptionSet::add_described(const char* name, const po::value_semantic* value, const char* help,
                                    std::function<std::string()> current) {
  current_group().add_options()(name, value, help);
  declared_.push_back({captions_.back(), name, std::move(current), {}, nullptr});
  return *this;
}

OptionSet& OptionSet::flag(const char* name, bool* field, const char* help) {
  // An explicit value is accepted too, so the command line can turn off what an INI file turned on.
  auto value =
      po::value<bool>(field)->default_value(*field, to_text(*field))->implicit_value(true, "true")->value_name("BOOL");
  return add_described(name, value, help, [field] { return to_text(*field); });
}

OptionSet& OptionSet::choice(const char* name, std::string* field, std::vector<std::string> allowed, const char* help) {
  auto value = po::value<std::string>(field)->default_value(*field)->value_name(join(allowed, "|"));
  current_group().add_options()(name, value, help);
  declared_.push_back({captions_.back(), name, [field] { return *field; }, std::move(allowed), field});
  return *this;
}

OptionSet& OptionSet::repeated(const char* name, std::vector<std::string>* values, const char* help) {
  auto value = po::value<std::vector<std::string>>(values)->composing()->value_name("VALUE");
  return add_described(name, value, help, [values] {
    std::string out;
    for (const auto& v : *values) out += (out.empty() ? "" : " ") + v;
    return out.empty() ? std::string("-") : out;
  });
}

OptionSet& OptionSet::positional(const char* name, std::vector<std::string>* values, const char* help, int max) {
  auto value = po::value<std::vector<std::string>>(values)->value_name("VALUE");
  current_group().add_options()(name, value, help);
  positional_.add(name, max);
  declared_.push_back({captions_.back(),
                       name,
                       [values] {
                         std::string out;
                         for (const auto& v : *values) out += (out.empty() ? "" : " ") + v;
                         return out;
                       },
                       {},
                       nullptr});
  return *this;
}

OptionSet& OptionSet::standard_options(std::string* config_file) {
  config_file_ = config_file;
  current_group().add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
      "config", po::value<std::string>(config_file)->value_name("FILE"),
      "INI file of options, same names as on the command line (\"lr = 1e-4\"); the command line wins");
  return *this;
}

OptionSet::Outcome OptionSet::parse(int argc, const char* const* argv) {
  po::options_description all;
  for (const auto& g : groups_) all.add(*g);
  std::vector<std::string> names = {"help", "version", "config"};
  for (const auto& d : declared_) names.push_back(d.name);
  // Boost's message, with the closest declared option when it looks like a typo.
  auto usage_error = [&](const po::error& e, const std::string& where, const std::string& dashes) {
    std::string message = where + e.what();
    if (const auto* unknown = dynamic_cast<const po::unknown_option*>(&e)) {
      std::string name = unknown->get_option_name();
      name.erase(0, name.find_first_not_of('-'));
      std::vector<std::string> spelled;
      for (const auto& n : names) spelled.push_back(dashes + n);
      message += did_you_mean(dashes + name, spelled);
    }
    return UsageError(message);
  };
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional_).run(), sources_cli_);
  } catch (const po::error& e) {
    throw usage_error(e, "", "--");
  }
  if (sources_cli_.count("help")) return Outcome::Help;
  if (sources_cli_.count("version")) return Outcome::Version;

  sources_all_ = sources_cli_;
  if (config_file_ && sources_cli_.count("config")) {
    config_name_ = sources_cli_["config"].as<std::string>();
    if (const auto why = unreadable_file_reason(config_name_); !why.empty())
      throw UsageError(fmt::format("--config {}: {}", config_name_, why));
    std::ifstream in(config_name_);
    if (!in) throw UsageError(fmt::format("--config {}: cannot open the file", config_name_));
    try {
      po::store(po::parse_config_file(in, all, /*allow_unregistered=*/false), sources_all_);
    } catch (const po::error& e) {
      throw usage_error(e, fmt::format("--config {}: ", config_name_), "");
    }
  }
  try {
    po::notify(sources_all_);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }

  for (const auto& d : declared_) {
    if (!d.choice_field) continue;
    if (std::find(d.choices.begin(), d.choices.end(), *d.choice_field) == d.choices.end())
      throw UsageError(
          fmt::format("option --{}: '{}' is not one of {}", d.name, *d.choice_field, join(d.choices, "|")));
  }
  return Outcome::Run;
}

std::string OptionSet::help_text() const {
  std::ostringstream out;
  out << "usage: " << program_ << " " << usage_ << "\n";
  for (const auto& g : groups_) out << "\n" << *g;
  return out.str();
}

std::vector<OptionSet::Resolved> OptionSet::resolved() const {
  std::vector<Resolved> rows;
  for (const auto& d : declared_) {
    std::string source = "default";
    if (sources_cli_.count(d.name) && !sources_cli_[d.name].defaulted())
      source = "command line";
    else if (sources_all_.count(d.name) && !sources_all_[d.name].defaulted())
      source = config_name_;
    rows.push_back({d.group, d.name, d.current(), source});
  }
  return rows;
}

std::map<std::string, std::string> OptionSet::setting_names(const std::map<std::string, std::string>& renames) const {
  std::map<std::string, std::string> names;
  for (const auto& d : declared_) {
    std::string setting = d.name;
    std::replace(setting.begin(), setting.end(), '-', '_');
    names.emplace(setting, d.name);
  }
  for (const auto& [setting, option] : renames) names[setting] = option;
  return names;
}

std::string OptionSet::resolved_table() const {
  const auto rows = resolved();
  size_t name_width = 0, value_width = 0;
  for (const auto& r : rows) {
    name_width = std::max(name_width, r.name.size());
    value_width = std::max(value_width, r.value.size());
  }
  std::string out, group;
  for (const auto& r : rows) {
    if (r.group != group) out += fmt::format("  {}\n", group = r.group);
    out += fmt::format("    {:<{}}  {:<{}}  ({})\n", r.name, name_width, r.value.empty() ? "-" : r.value, value_width,
                       r.source);
  }
  return out;
}

std::vector<int64_t> parse_sizes(const std::string& text, const std::string& form, const char* example,
                                 const char* option) {
  const size_t count = size_t(std::count(form.begin(), form.end(), 'x')) + 1;
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (sizes.size() < count && start <= text.size()) {
    const size_t end = std::min(text.find('x', start), text.size());
    const std::string part = text.substr(start, end - start);
    const bool digits = !part.empty() && part.size() <= 7 && part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(part) < 1 || std::stoll(part) > (1 << 20)) break;
    sizes.push_back(std::stoll(part));
    start = end + 1;
  }
  if (sizes.size() != count || start != text.size() + 1)
    throw UsageError(
        fmt::format("option --{}: '{}' is not {} with positive sizes, e.g. {}", option, text, form, example));
  return sizes;
}

std::pair<int64_t, int64_t> parse_height_width(const std::string& text, const char* option) {
  const auto sizes = parse_sizes(text, "HxW", "32x32", option);
  return {sizes[0], sizes[1]};
}

}  // namespace wt
