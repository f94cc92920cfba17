#include "run/config.h"

#include <boost/program_options.hpp>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "errors.h"

namespace po = boost::program_options;

namespace rssm {

const std::vector<KeyDef>& config_keys() {
  // One table for every key. Keep help lines to one line: they become defaults.ini's comments.
  // A sweep key's help does not say so itself: defaults_text() marks it "(sweep)" from KeyDef::sweep.
  static const std::vector<KeyDef> keys = {
      {"run.output", "results/run.h5", "result file (HDF5); written to a temporary name and renamed at the end",
       false},
      {"run.steps", "0", "decode steps to run from the start of the trace (0 = all of it; more than it has is an error)",
       false},
      {"run.seqs", "0", "sequences to run, the first ones of the trace (0 = all; more than it has is an error)", false},
      {"run.chunk", "64", "steps read from the trace and advanced per decoder call", false},
      {"run.threads", "0", "OpenMP threads for the decoders (0 = all cores)", false},
      {"run.save_outputs", "false",
       "also store every decoder's raw outputs [step, seq, out] and the reference's (small runs only)", false},
      {"run.max_output_gb", "2", "refuse save_outputs when the stored outputs would exceed this many GB", false},
      {"run.batch", "0",
       "sweep points advanced together with one reference (0 = split the sweep evenly over --jobs); a finished "
       "batch is saved at once",
       false},
      {"run.seed", "0", "seed of stochastic rounding and of the synthesised readout matrix", false},

      {"metrics.kl", "true", "KL divergence and top-1 agreement through a readout (see README: Metrics)", false},
      {"metrics.vocab", "4096", "rows of the synthesised readout when the trace has none", false},
      {"metrics.logit_std", "4", "standard deviation of the reference logits the synthesised readout is scaled to",
       false},
      {"metrics.state_error", "true", "state error of every checkpoint copy at every flush (per decay band)", false},
      {"metrics.eager_state_every", "16", "steps between state-error observations of eager decoders", false},

      {"trace.file", "", "HDF5 trace file (format: docs/trace_format.md); empty = synthesise one with [synth]", false},

      {"model.weights", "",
       "language-model weights (docs/model_format.md); when set, `run` decodes the whole model with every SSM layer "
       "under each scheme, against the model in fp64, instead of a trace",
       false},
      {"model.text", "data/tiny_hybrid/heldout.txt",
       "text the sequences read (teacher) or take their prompts from (free), from evenly spaced offsets", false},
      {"model.mode", "teacher",
       "teacher: read the text, compare next-byte distributions; free: greedy generation after a prompt", false},
      {"model.seqs", "2", "sequences decoded together", false},
      {"model.steps", "4096", "teacher: bytes read per sequence; free: bytes generated after the prompt", false},
      {"model.prompt", "64", "free: bytes of text read before generating", false},
      {"model.network", "fp32",
       "precision of everything outside the SSM recurrences under a scheme (fp32 or fp64); the reference is fp64",
       false},

      {"synth.preset", "nemotron3-nano-30b",
       "geometry preset (nemotron3-nano-4b, nemotron3-super-120b, nemotron3-ultra-550b, nemotron3-nano-30b, "
       "granite4-h-small, qwen35-4b, qwen35-122b) or 'custom' with the geometry keys below",
       false},
      {"synth.family", "mamba2", "family for preset = custom: mamba2 or gdn", false},
      {"synth.H", "0", "Mamba-2 heads (preset = custom)", false},
      {"synth.P", "0", "Mamba-2 head dim (preset = custom)", false},
      {"synth.N", "0", "Mamba-2 state dim (preset = custom)", false},
      {"synth.G", "0", "Mamba-2 groups sharing B and C (preset = custom)", false},
      {"synth.HK", "0", "GDN key heads (preset = custom)", false},
      {"synth.HV", "0", "GDN value heads, a multiple of HK (preset = custom)", false},
      {"synth.K", "0", "GDN key dim (preset = custom)", false},
      {"synth.V", "0", "GDN value dim (preset = custom)", false},
      {"synth.steps", "1024", "steps to synthesise", false},
      {"synth.seqs", "2", "sequences to synthesise", false},
      {"synth.seed", "1", "seed: the same seed and keys give the same trace, byte for byte", false},
      {"synth.d_per_dim", "false", "Mamba-2: D per (head, dim) instead of per head", false},
      {"synth.has_z", "false", "Mamba-2: include the output gate z", false},
      {"synth.dt_min", "0", "Mamba-2: lower limit on softplus(dt + dt_bias)", false},
      {"synth.dt_max", "inf", "Mamba-2: upper limit on softplus(dt + dt_bias) (inf = none)", false},
      {"synth.outlier_channels", "4", "persistent outlier channels per input row (x, B, C; GDN v)", false},
      {"synth.outlier_scale_min", "10", "smallest outlier-channel magnification", false},
      {"synth.outlier_scale_max", "100", "largest outlier-channel magnification", false},
      {"synth.spike_head_frac", "0.05", "share of heads that get dt spikes", false},
      {"synth.spike_token_frac", "0.005", "share of tokens on which a spiking head spikes", false},
      {"synth.slow_head_frac", "auto",
       "share of heads with almost no decay (A_log = log 1e-3: a memory longer than the trace); auto = 0.125 for GDN "
       "(METHOD.md's recipe) and 0 for Mamba-2 (whose initialisation has none; trained layers can)",
       false},
      {"synth.readout_vocab", "0", "also synthesise a readout matrix with this many rows (0 = none)", false},

      {"scheme.decoder", "eager",
       "decoders under test: eager (state written every step), replay (checkpoint + buffer, one shared "
       "checkpoint), dual (replay with an update copy and a separate read copy)",
       true},
      {"scheme.state_format", "fp32",
       "eager: the state's format (fp64, fp32, bf16, fp16); replay: the shared checkpoint's format (also e4m3, "
       "e5m2, int8 with per-row scales); dual: the update copy's format",
       true},
      {"scheme.read_format", "bf16", "dual only: the read copy's format (bf16, fp16, e4m3, e5m2, int8, fp32)",
       true},
      {"scheme.buffer_format", "bf16", "replay/dual: format of buffered x, B / u, k (fp64, fp32, bf16, fp16)",
       true},
      {"scheme.interval", "8",
       "replay/dual: checkpoint interval K, flush every K steps (1..65536; the CPU decoders run up to 1024)", true},
      {"scheme.buffer_len", "0",
       "replay/dual: ring capacity in entries, >= interval (0 = interval); larger models a ring shared with "
       "speculative windows (memory and traffic only)",
       true},
      {"scheme.dot_arith", "fp32", "replay/dual: arithmetic of the output dots: fp64, fp32, tf32, 3xtf32, bf16",
       true},
      {"scheme.flush_arith", "fp32", "replay/dual: arithmetic of the flush GEMM: fp64, fp32, tf32, 3xtf32, bf16",
       true},
      {"scheme.rounding", "nearest", "rounding of state/checkpoint stores: nearest (even) or stochastic", true},
      {"scheme.route", "inner", "GDN replay route: inner (inner products) or reconstruct (rebuild the state)",
       true},
      {"scheme.act_format", "bf16",
       "activation format: inputs are rounded to it before any decoder, the fp64 reference included "
       "(fp32, bf16, fp16)",
       true},
      {"scheme.out_format", "fp32",
       "format every decoder's outputs y are rounded to (nearest-even) before they are compared: fp64, fp32, bf16, "
       "fp16 (kernels store y in bf16 in serving)",
       true},
      {"scheme.backend", "cpu",
       "where the decoder runs: cpu (the emulation) or cuda (a kernel; skipped with the reason when this build or "
       "machine has none); points differing only in backend share a batch and store their difference",
       true},
      {"spec.window", "0",
       "speculative decoding: verify windows of this many positions per row (the last produced token and window - 1 "
       "drafts; 0 = standard decoding, 1..64); eager becomes the eager speculative baseline (a state per draft), "
       "replay/dual verify from the checkpoint plus the ring, whose L_hist is scheme.buffer_len (0 = interval + "
       "window)",
       true},
      {"spec.acceptance", "prob:0.7",
       "speculative decoding: tokens each window commits: all, fixed:N, prob:P (each draft accepted with probability "
       "P until the first rejection, drawn per sequence from run.seed) or trace (the trace's /spec/accepted)",
       true},
  };
  return keys;
}

namespace {
const KeyDef* find_key(const std::string& key) {
  for (const auto& k : config_keys())
    if (k.key == key) return &k;
  return nullptr;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Known keys as a short hint for "unknown key" messages: the keys of the same section.
std::string section_keys(const std::string& key) {
  const auto dot = key.find('.');
  const std::string sec = dot == std::string::npos ? "" : key.substr(0, dot + 1);
  std::vector<std::string> names;
  for (const auto& k : config_keys())
    if (!sec.empty() && k.key.rfind(sec, 0) == 0) names.push_back(k.key);
  if (names.empty()) {
    std::vector<std::string> secs;
    for (const auto& k : config_keys()) {
      std::string s = k.key.substr(0, k.key.find('.'));
      if (secs.empty() || secs.back() != s) secs.push_back(s);
    }
    return fmt::format("known sections: {}", fmt::join(secs, ", "));
  }
  return fmt::format("known keys: {}", fmt::join(names, ", "));
}
}  // namespace

void reject_option_placeholders(const std::string& where, const std::string& text) {
  // %word% with a lower-case/underscore word: what Boost's message templates substitute.
  size_t pos = 0;
  while ((pos = text.find('%', pos)) != std::string::npos) {
    size_t end = pos + 1;
    while (end < text.size() && (std::islower(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
    if (end > pos + 1 && end < text.size() && text[end] == '%')
      throw ConfigError(fmt::format("{}: '{}' contains '{}', which is not allowed in keys, values or arguments", where,
                                    text.size() > 80 ? text.substr(0, 80) + "..." : text,
                                    text.substr(pos, end - pos + 1)));
    pos = end;
  }
}

Config::Config() {
  for (const auto& k : config_keys()) values_[k.key] = k.def;
}

void Config::load_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(fmt::format("{}: is a directory, not a config file", path));
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot open config file (missing or unreadable)", path));
  // Reject binary files up front: Program_options would otherwise report a confusing syntax error.
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  for (unsigned char ch : text)
    if (ch == 0 || (ch < 32 && ch != '\n' && ch != '\r' && ch != '\t'))
      throw ConfigError(fmt::format("{}: not a text INI file (contains control bytes)", path));
  {
    std::istringstream lines(text);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) reject_option_placeholders(fmt::format("{}: line {}", path, ++n), line);
  }
  po::options_description desc;
  for (const auto& k : config_keys()) desc.add_options()(k.key.c_str(), po::value<std::string>());
  po::variables_map vm;
  std::istringstream is(text);
  try {
    po::store(po::parse_config_file(is, desc, false), vm);
  } catch (const po::unknown_option& e) {
    throw ConfigError(fmt::format("{}: unknown config key '{}' ({})", path, e.get_option_name(),
                                  section_keys(e.get_option_name())));
  } catch (const po::multiple_occurrences& e) {
    throw ConfigError(fmt::format("{}: config key '{}' is given more than once", path, e.get_option_name()));
  } catch (const po::error& e) {
    throw ConfigError(fmt::format("{}: {}", path, e.what()));
  }
  for (const auto& [key, val] : vm) values_[key] = trim(val.as<std::string>());
  sources_.push_back(path);
}

void Config::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos)
    throw ConfigError(fmt::format("--set '{}': expected section.key=value", assignment));
  const std::string key = trim(assignment.substr(0, eq));
  if (!find_key(key)) throw ConfigError(fmt::format("--set: unknown config key '{}' ({})", key, section_keys(key)));
  values_[key] = trim(assignment.substr(eq + 1));
}

const std::string& Config::str(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw InternalError("undeclared config key " + key);
  return it->second;
}

namespace {
[[noreturn]] void bad(const std::string& key, const std::string& want, const std::string& got) {
  throw ConfigError(fmt::format("config key '{}': expected {}, got '{}'", key, want, got));
}
}  // namespace

long long Config::integer(const std::string& key, long long lo, long long hi) const {
  const std::string& s = str(key);
  const std::string want = hi == std::numeric_limits<long long>::max()
                               ? fmt::format("an integer >= {}", lo)
                               : fmt::format("an integer in [{}, {}]", lo, hi);
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (const std::exception&) {
    bad(key, want, s);
  }
  if (pos != s.size() || v < lo || v > hi) bad(key, want, s);
  return v;
}

double Config::real(const std::string& key, double lo, double hi) const {
  const std::string& s = str(key);
  const std::string want = fmt::format("a number in [{}, {}]", lo, hi);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    bad(key, want, s);
  }
  if (pos != s.size() || std::isnan(v) || v < lo || v > hi) bad(key, want, s);
  return v;
}

bool Config::boolean(const std::string& key) const {
  const std::string& s = str(key);
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  bad(key, "true or false", s);
}

std::string Config::choice(const std::string& key, const std::vector<std::string>& accepted) const {
  const std::string& s = str(key);
  for (const auto& a : accepted)
    if (s == a) return s;
  bad(key, fmt::format("one of {}", fmt::join(accepted, ", ")), s);
}

std::vector<std::string> Config::list(const std::string& key) const {
  std::vector<std::string> out;
  std::stringstream ss(str(key));
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) bad(key, "a comma list without empty items", str(key));
    out.push_back(item);
  }
  if (out.empty()) bad(key, "at least one value", str(key));
  return out;
}

std::string Config::resolved_text() const {
  std::string out, section;
  for (const auto& k : config_keys()) {
    const std::string sec = k.key.substr(0, k.key.find('.'));
    if (sec != section) {
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", sec);
      section = sec;
    }
    out += fmt::format("{} = {}\n", k.key.substr(sec.size() + 1), str(k.key));
  }
  return out;
}

std::string Config::identity_text(const std::string& resolved) {
  std::string out, section, line;
  std::istringstream in(resolved);
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '[') section = line;
    if (section == "[run]" && line.rfind("output =", 0) == 0) continue;
    out += line + "\n";
  }
  return out;
}

std::string Config::defaults_text() {
  std::string out =
      "# Every configuration key of replayssm with its default value and a help line.\n"
      "# Generated by `replayssm defaults`; tests check that this file matches the program.\n"
      "# A key marked (sweep) takes a comma list; runs are the Cartesian product of all lists.\n"
      "# Override any key on the command line: --set section.key=value\n";
  std::string section;
  for (const auto& k : config_keys()) {
    const std::string sec = k.key.substr(0, k.key.find('.'));
    if (sec != section) {
      out += fmt::format("\n[{}]\n", sec);
      section = sec;
    }
    out += fmt::format("# {}{}\n{} = {}\n", k.sweep ? "(sweep) " : "", k.help, k.key.substr(sec.size() + 1), k.def);
  }
  return out;
}

}  // namespace rssm
