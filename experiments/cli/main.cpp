// replayssm: run decoding experiments (fp64 reference vs schemes under test), synthesise and inspect traces.
// `replayssm --help` lists the subcommands; `replayssm SUBCOMMAND --help` documents each.
// All the work is in dispatch.cpp (main_args), so the fuzzer can drive the same code in-process.
#include <string>
#include <vector>

#include "cli/cli.h"

int main(int argc, char** argv) { return rssm::cli::main_args(std::vector<std::string>(argv, argv + argc)); }
