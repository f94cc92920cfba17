#include "model/model.h"

#include <cmath>
#include <fmt/format.h>

#include "errors.h"

namespace rssm {

std::string family_name(Family f) { return f == Family::Mamba2 ? "mamba2" : "gdn"; }

Family parse_family(const std::string& name) {
  if (name == "mamba2") return Family::Mamba2;
  if (name == "gdn") return Family::GDN;
  throw ConfigError(fmt::format("unknown model family '{}' (accepted: mamba2, gdn)", name));
}

std::vector<InputSpec> Model::inputs() const {
  if (family == Family::Mamba2) {
    const auto& m = mamba2;
    std::vector<InputSpec> v = {{"x", {m.H, m.P}, false},
                                {"dt", {m.H}, false},
                                {"B", {m.G, m.N}, false},
                                {"C", {m.G, m.N}, false}};
    if (m.has_z) v.push_back({"z", {m.H, m.P}, true});
    return v;
  }
  const auto& g = gdn;
  return {{"q", {g.HK, g.K}, false},
          {"k", {g.HK, g.K}, false},
          {"v", {g.HV, g.V}, false},
          {"a", {g.HV}, false},
          {"b", {g.HV}, false}};
}

int Model::out_elems() const { return family == Family::Mamba2 ? mamba2.out_elems() : gdn.out_elems(); }

long long Model::state_elems() const {
  return family == Family::Mamba2 ? mamba2.state_elems() : gdn.state_elems();
}

std::string Model::geometry_string() const {
  if (family == Family::Mamba2)
    return fmt::format("H={} P={} N={} G={}", mamba2.H, mamba2.P, mamba2.N, mamba2.G);
  return fmt::format("HK={} HV={} K={} V={}", gdn.HK, gdn.HV, gdn.K, gdn.V);
}

void Model::validate(const char* where) const {
  if (family == Family::Mamba2)
    mamba2.validate(where);
  else
    gdn.validate(where);
}

namespace {

struct Preset {
  const char* name;
  Family family;
  int a, b, c, d;  // Mamba-2: H P N G; GDN: HK HV K V
};

// METHOD.md, "Model geometries" (per layer, tensor parallel 1).
const Preset kPresets[] = {
    {"nemotron3-nano-4b", Family::Mamba2, 96, 80, 128, 8},
    {"nemotron3-super-120b", Family::Mamba2, 128, 64, 128, 8},
    {"nemotron3-ultra-550b", Family::Mamba2, 256, 64, 128, 8},
    {"nemotron3-nano-30b", Family::Mamba2, 64, 64, 128, 8},
    {"granite4-h-small", Family::Mamba2, 128, 64, 128, 1},
    {"qwen35-4b", Family::GDN, 16, 32, 128, 128},
    {"qwen35-122b", Family::GDN, 16, 64, 128, 128},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  return v;
}

Model model_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    Model m;
    m.family = p.family;
    if (p.family == Family::Mamba2) {
      m.mamba2.H = p.a;
      m.mamba2.P = p.b;
      m.mamba2.N = p.c;
      m.mamba2.G = p.d;
    } else {
      m.gdn.HK = p.a;
      m.gdn.HV = p.b;
      m.gdn.K = p.c;
      m.gdn.V = p.d;
    }
    return m;
  }
  throw ConfigError(fmt::format("unknown preset '{}' (accepted: {}, or 'custom' with explicit geometry)", name,
                                fmt::join(preset_names(), ", ")));
}

}  // namespace rssm
