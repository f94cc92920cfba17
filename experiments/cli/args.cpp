#include <fmt/format.h>

#include "cli/cli.h"
#include "errors.h"

namespace rssm::cli {

bool parse_args(const std::string& sub, const Args& args, const std::string& usage, po::options_description& opts,
                const po::positional_options_description& pos, po::variables_map& vm,
                const std::vector<std::string>& required) {
  opts.add_options()("help,h", "show this help");
  for (const auto& a : args) reject_option_placeholders(fmt::format("replayssm {}", sub), a);
  try {
    po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
    if (vm.count("help")) {
      fmt::print("{}\n", usage);
      std::ostringstream os;
      os << opts;
      fmt::print("{}", os.str());
      return false;
    }
    po::notify(vm);
  } catch (const po::too_many_positional_options_error&) {
    throw ConfigError(fmt::format("replayssm {}: too many arguments (see replayssm {} --help)", sub, sub));
  } catch (const po::error& e) {
    throw ConfigError(fmt::format("replayssm {}: {} (see replayssm {} --help)", sub, e.what(), sub));
  }
  for (const auto& r : required)
    if (!vm.count(r))
      throw ConfigError(fmt::format("replayssm {}: missing argument {} (see replayssm {} --help)", sub, r, sub));
  return true;
}

void add_config_options(po::options_description& opts) {
  opts.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                     "override a config key: --set section.key=value (repeatable; comma lists make sweep axes)");
}

Config load_config(const po::variables_map& vm, const std::string& config_key) {
  Config cfg;
  if (vm.count(config_key)) cfg.load_file(vm[config_key].as<std::string>());
  if (vm.count("set"))
    for (const auto& s : vm["set"].as<std::vector<std::string>>()) cfg.set(s);
  return cfg;
}

}  // namespace rssm::cli
