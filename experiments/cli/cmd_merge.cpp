// replayssm merge OUT IN...: joins the result files of a sharded sweep (`run --shard i/n`) into one file, as if the
// sweep had run in one process. The inputs must come from the same config and together be the shards 0..n-1.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "cli/cli.h"
#include "errors.h"
#include "io/results.h"
#include "run/runner.h"

namespace rssm::cli {

namespace {
std::string attr_of(const AttrMap& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : "";
  return "";
}
}  // namespace

int cmd_merge(const Args& args) {
  const std::string usage =
      "usage: replayssm merge OUT IN1 IN2 ...\n"
      "\n"
      "Joins the result files of a sharded sweep (replayssm run CONFIG --shard i/n, one file per shard) into OUT.\n"
      "Every input must come from the same config, the shards must be distinct and complete (0..n-1), and no run\n"
      "may be missing. The merged file keeps the first input's provenance and records the inputs.";
  po::options_description opts("options");
  opts.add_options()("out", po::value<std::string>(), "merged result file")(
      "inputs", po::value<std::vector<std::string>>(), "shard result files");
  po::positional_options_description pos;
  pos.add("out", 1).add("inputs", -1);
  po::variables_map vm;
  if (!parse_args("merge", args, usage, opts, pos, vm, {"out", "inputs"})) return 0;
  const auto inputs = vm["inputs"].as<std::vector<std::string>>();
  ResultSet merged;
  std::string config;
  std::set<int> shards;
  int shard_count = -1;
  for (const auto& path : inputs) {
    ResultSet rs = read_result_file(path);
    const std::string cfg = attr_of(rs.root, "config"), shard = attr_of(rs.root, "shard");
    int i = -1, n = -1;
    if (std::sscanf(shard.c_str(), "%d/%d", &i, &n) != 2)
      throw FormatError(fmt::format("{}: attribute 'shard' is missing or malformed ('{}')", path, shard));
    if (merged.root.empty()) {
      merged.root = rs.root;
      config = cfg;
      shard_count = n;
    } else if (Config::identity_text(cfg) != Config::identity_text(config)) {
      throw FormatError(fmt::format("{}: written by a different config than {}", path, inputs[0]));
    } else if (n != shard_count) {
      throw FormatError(fmt::format("{}: shard {} does not match {}'s count {}", path, shard, inputs[0], shard_count));
    }
    if (!shards.insert(i).second) throw FormatError(fmt::format("{}: shard {} given twice", path, shard));
    for (auto& r : rs.runs) {
      if (!r.completed() && attr_of(r.summary, "status") == "pending")
        throw FormatError(fmt::format("{}: run {} is not complete (finish it with --resume first)", path, r.id));
      merged.runs.push_back(std::move(r));
    }
    for (auto& [act, v] : rs.reference_outputs)
      if (!merged.reference_outputs.count(act)) {
        merged.reference_outputs[act] = std::move(v);
        merged.reference_dims = rs.reference_dims;
      }
  }
  if (static_cast<int>(shards.size()) != shard_count)
    throw ConfigError(fmt::format("replayssm merge: {} of {} shards given", shards.size(), shard_count));
  std::sort(merged.runs.begin(), merged.runs.end(), [](const RunRecord& a, const RunRecord& b) { return a.id < b.id; });
  for (auto& [k, v] : merged.root)
    if (k == "shard") v = fmt::format("merged {}", shard_count);
  std::string joined;
  for (const auto& p : inputs) joined += (joined.empty() ? "" : ", ") + p;
  merged.root.emplace_back("merged_from", joined);
  const std::string out = vm["out"].as<std::string>();
  write_result_file(out, merged);
  fmt::print("wrote {}: {} runs from {} shards\n", out, merged.runs.size(), shard_count);
  return 0;
}

}  // namespace rssm::cli
