// Experiment configuration: INI files parsed by Boost.Program_options, overridden by `--set section.key=value`.
// Every key is declared once in config.cpp (name, default, help, whether it may be a sweep list); defaults.ini is
// generated from that table (`replayssm defaults`) and a test keeps the committed copy in step.
// Parsing (text -> resolved strings) and validation (strings -> typed values, with errors that name the key)
// are separate: the resolved text is stored verbatim in every result file as provenance.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace rssm {

struct KeyDef {
  std::string key;   // "section.name"
  std::string def;   // default value as text
  std::string help;  // one line
  bool sweep;        // may hold a comma list (a sweep axis)
};

// Every key the harness understands, in the order defaults.ini lists them.
const std::vector<KeyDef>& config_keys();

// Boost.Program_options formats its error messages by substituting %name% placeholders, and loops forever when the
// offending text itself contains one (found by fuzzing). Throws ConfigError naming `where` when `text` holds one.
void reject_option_placeholders(const std::string& where, const std::string& text);

class Config {
 public:
  // All keys at their defaults.
  Config();
  // Reads an INI file over the current values. Throws ConfigError naming the file and the key (unknown key,
  // repeated key, unreadable file, syntax error).
  void load_file(const std::string& path);
  // Applies one "section.key=value" override. Throws ConfigError for an unknown key or a missing '='.
  void set(const std::string& assignment);

  const std::string& str(const std::string& key) const;  // resolved text of a key (InternalError if undeclared)
  // Typed getters; each throws ConfigError "config key 'k': expected ..., got '...'" when the text does not parse
  // or is out of [lo, hi]. None accepts a comma list: use list() for sweep keys.
  long long integer(const std::string& key, long long lo, long long hi) const;
  double real(const std::string& key, double lo, double hi) const;
  bool boolean(const std::string& key) const;
  std::string choice(const std::string& key, const std::vector<std::string>& accepted) const;
  // A sweep key's values, split on commas, trimmed; empty items are an error.
  std::vector<std::string> list(const std::string& key) const;

  // "[section]\nkey = value\n..." for every key, as resolved: stored in result files and printed by --dry-run.
  std::string resolved_text() const;
  // The resolved text without the keys that name where results go (run.output): two runs whose identity texts
  // are equal compute the same points, so --resume and `merge` compare these.
  static std::string identity_text(const std::string& resolved);
  // defaults.ini: every key with its default and help line.
  static std::string defaults_text();
  // Where values came from, for messages: the files loaded, in order.
  const std::vector<std::string>& sources() const { return sources_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> sources_;
};

}  // namespace rssm
