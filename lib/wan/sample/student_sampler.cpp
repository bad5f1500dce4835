#include "wantrain/wan/sample/student_sampler.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/text.hpp"

namespace wt::wan {
namespace {

constexpr const char* kKeys[] = {"sampler_solver", "sampler_steps", "sampler_shift", "sampler_sigmas"};

double number(const std::string& text, const std::string& source, const char* key) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value))
    throw UsageError(fmt::format("{}: {} '{}' is not a number", source, key, text));
  return value;
}

}  // namespace

std::optional<StudentSampler> student_sampler_from(const std::map<std::string, std::string>& fields,
                                                   const std::string& source) {
  if (!fields.count("sampler_steps")) return std::nullopt;
  for (const char* key : kKeys)
    if (!fields.count(key)) throw UsageError(fmt::format("{}: has sampler_steps but no {}", source, key));
  StudentSampler s;
  const auto solver = solver_from_name(fields.at("sampler_solver"));
  if (!solver)
    throw UsageError(
        fmt::format("{}: sampler_solver '{}' is none of wansample's", source, fields.at("sampler_solver")));
  s.solver = *solver;
  const double steps = number(fields.at("sampler_steps"), source, "sampler_steps");
  if (steps < 1 || steps > 10000 || steps != std::floor(steps))
    throw UsageError(fmt::format("{}: sampler_steps {} is no number of steps", source, fields.at("sampler_steps")));
  s.steps = int(steps);
  s.shift = number(fields.at("sampler_shift"), source, "sampler_shift");
  if (!(s.shift > 0)) throw UsageError(fmt::format("{}: sampler_shift {} must be positive", source, s.shift));
  for (const auto& item : split_list(fields.at("sampler_sigmas")))
    s.sigmas.push_back(number(item, source, "sampler_sigmas"));
  // The sigmas are a record of what was trained; sampling recomputes them
  // from the solver, so they must be the solver's.
  const auto expected = make_flow_solver(s.solver, s.steps, s.shift)->sigmas();
  bool same = s.sigmas.size() == expected.size();
  for (size_t i = 0; same && i < expected.size(); ++i) same = std::abs(s.sigmas[i] - expected[i]) <= 1e-5;
  if (!same)
    throw UsageError(fmt::format("{}: sampler_sigmas {} are not {}'s at {} steps and shift {:g}", source,
                                 fields.at("sampler_sigmas"), solver_name(s.solver), s.steps, s.shift));
  return s;
}

std::optional<StudentSampler> student_sampler_of_weights(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::path(path).extension() != ".safetensors" || !fs::is_regular_file(path, ec)) return std::nullopt;
  return student_sampler_from(io::SafetensorsFile::open(path).metadata(), path + " (its metadata)");
}

std::optional<StudentSampler> student_sampler_of_checkpoint(const std::string& path) {
  const auto objective = ckpt::read_objective(path);
  return student_sampler_from(objective.state, fmt::format("checkpoint {}: /objective", path));
}

std::map<std::string, std::string> student_sampler_fields(const std::map<std::string, std::string>& fields) {
  std::map<std::string, std::string> out;
  for (const char* key : kKeys)
    if (const auto it = fields.find(key); it != fields.end()) out.emplace(key, it->second);
  return out;
}

std::string describe(const StudentSampler& sampler) {
  std::string sigmas;
  for (const double sigma : sampler.sigmas) sigmas += (sigmas.empty() ? "" : ", ") + fmt::format("{:.3g}", sigma);
  return fmt::format("{}, {} step{} at shift {:g} (sigmas {})", solver_name(sampler.solver), sampler.steps,
                     sampler.steps == 1 ? "" : "s", sampler.shift, sigmas);
}

}  // namespace wt::wan
