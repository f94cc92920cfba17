// The `replayssm` command: one function per subcommand. Each returns the process exit code; errors are thrown
// as ConfigError (bad command line or config: exit 2) or FormatError / other exceptions (exit 1) and printed by
// main_args as one line.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "run/config.h"

namespace rssm::cli {

using Args = std::vector<std::string>;  // arguments after the subcommand name
namespace po = boost::program_options;

// The whole command: argv as main() receives it (argv[0] is the program name, argv[1] the subcommand). Returns the
// exit code; prints every error as one line on stderr. Throws nothing and never exits, so it can run in-process
// (dispatch.cpp; main.cpp and the CLI fuzzer call it).
int main_args(const std::vector<std::string>& argv);

int cmd_run(const Args& args);
int cmd_synth(const Args& args);
int cmd_inspect(const Args& args);
int cmd_defaults(const Args& args);
int cmd_merge(const Args& args);
int cmd_traffic(const Args& args);

// Parses args for subcommand `sub`; throws ConfigError naming the subcommand on an unknown flag, a missing value
// or a missing positional argument. Returns false when --help was asked for (and printed `usage` + options).
bool parse_args(const std::string& sub, const Args& args, const std::string& usage, po::options_description& opts,
                const po::positional_options_description& pos, po::variables_map& vm,
                const std::vector<std::string>& required);

// Options every config-reading subcommand shares: --set (repeatable).
void add_config_options(po::options_description& opts);
// Loads the config file (when given) and applies every --set, in order.
Config load_config(const po::variables_map& vm, const std::string& config_key);

}  // namespace rssm::cli
