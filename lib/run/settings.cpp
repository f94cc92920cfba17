#include "run/settings.h"

#include <fmt/format.h>
#include <limits>

#include "errors.h"
#include "trace/trace_h5.h"

namespace rssm {

SynthConfig synth_config(const Config& cfg) {
  SynthConfig sc;
  const std::string preset = cfg.str("synth.preset");
  const long long big = 1 << 20;
  const char* geo_m[] = {"synth.H", "synth.P", "synth.N", "synth.G"};
  const char* geo_g[] = {"synth.HK", "synth.HV", "synth.K", "synth.V"};
  if (preset == "custom") {
    sc.model.family = parse_family(cfg.choice("synth.family", {"mamba2", "gdn"}));
    if (sc.model.family == Family::Mamba2) {
      auto& m = sc.model.mamba2;
      m.H = static_cast<int>(cfg.integer("synth.H", 1, 4096));
      m.P = static_cast<int>(cfg.integer("synth.P", 1, 4096));
      m.N = static_cast<int>(cfg.integer("synth.N", 1, 4096));
      m.G = static_cast<int>(cfg.integer("synth.G", 1, m.H));
      if (m.H % m.G != 0)
        throw ConfigError(fmt::format("config keys 'synth.H' and 'synth.G': H={} must be a multiple of G={}", m.H, m.G));
      for (auto k : geo_g)
        if (cfg.integer(k, 0, big) != 0)
          throw ConfigError(fmt::format("config key '{}': a GDN geometry key set with synth.family = mamba2", k));
    } else {
      auto& g = sc.model.gdn;
      g.HK = static_cast<int>(cfg.integer("synth.HK", 1, 4096));
      g.HV = static_cast<int>(cfg.integer("synth.HV", 1, 4096));
      g.K = static_cast<int>(cfg.integer("synth.K", 1, 4096));
      g.V = static_cast<int>(cfg.integer("synth.V", 1, 4096));
      if (g.HV % g.HK != 0)
        throw ConfigError(
            fmt::format("config keys 'synth.HV' and 'synth.HK': HV={} must be a multiple of HK={}", g.HV, g.HK));
      for (auto k : geo_m)
        if (cfg.integer(k, 0, big) != 0)
          throw ConfigError(fmt::format("config key '{}': a Mamba-2 geometry key set with synth.family = gdn", k));
    }
  } else {
    try {
      sc.model = model_preset(preset);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key 'synth.preset': {}", e.what()));
    }
    for (auto list : {geo_m, geo_g})
      for (int i = 0; i < 4; ++i)
        if (cfg.integer(list[i], 0, big) != 0)
          throw ConfigError(fmt::format(
              "config key '{}': explicit geometry needs synth.preset = custom (preset '{}' fixes the geometry)",
              list[i], preset));
  }
  auto& m = sc.model.mamba2;
  m.d_per_dim = cfg.boolean("synth.d_per_dim");
  m.has_z = cfg.boolean("synth.has_z");
  m.dt_min = cfg.real("synth.dt_min", 0.0, 1e6);
  m.dt_max = cfg.real("synth.dt_max", 0.0, std::numeric_limits<double>::infinity());
  if (!(m.dt_max > m.dt_min))
    throw ConfigError(fmt::format("config keys 'synth.dt_min' and 'synth.dt_max': need dt_min < dt_max (got {} and {})",
                                  m.dt_min, m.dt_max));
  sc.steps = cfg.integer("synth.steps", 1, 1LL << 40);
  sc.seqs = static_cast<int>(cfg.integer("synth.seqs", 1, 1 << 16));
  sc.seed = static_cast<uint64_t>(cfg.integer("synth.seed", 0, std::numeric_limits<long long>::max()));
  sc.outlier_channels = static_cast<int>(cfg.integer("synth.outlier_channels", 0, 1 << 16));
  sc.outlier_scale_min = cfg.real("synth.outlier_scale_min", 1.0, 1e6);
  sc.outlier_scale_max = cfg.real("synth.outlier_scale_max", 1.0, 1e6);
  if (sc.outlier_scale_max < sc.outlier_scale_min)
    throw ConfigError("config keys 'synth.outlier_scale_min' and 'synth.outlier_scale_max': need min <= max");
  sc.spike_head_frac = cfg.real("synth.spike_head_frac", 0.0, 1.0);
  sc.spike_token_frac = cfg.real("synth.spike_token_frac", 0.0, 1.0);
  sc.slow_head_frac = cfg.str("synth.slow_head_frac") == "auto"
                          ? (sc.model.family == Family::GDN ? 0.125 : 0.0)
                          : cfg.real("synth.slow_head_frac", 0.0, 1.0);
  sc.readout_vocab = static_cast<int>(cfg.integer("synth.readout_vocab", 0, 1 << 20));
  const long long readout_elems = static_cast<long long>(sc.readout_vocab) * sc.model.out_elems();
  if (readout_elems > (1LL << 28))
    throw ConfigError(fmt::format("config key 'synth.readout_vocab': {} rows x {} outputs = {:.1f} GB of readout, more "
                                  "than the 1 GB a trace's readout may take",
                                  sc.readout_vocab, sc.model.out_elems(), readout_elems * 4 / 1e9));
  return sc;
}

std::unique_ptr<TraceSource> open_trace(const Config& cfg) {
  const std::string& file = cfg.str("trace.file");
  if (!file.empty()) return std::make_unique<H5TraceSource>(file);
  return std::make_unique<SynthSource>(synth_config(cfg));
}


RunSettings read_settings(const Config& cfg) {
  RunSettings st;
  st.output = cfg.str("run.output");
  if (st.output.empty()) throw ConfigError("config key 'run.output': must name a result file");
  st.steps = cfg.integer("run.steps", 0, std::numeric_limits<long long>::max());
  st.seqs = cfg.integer("run.seqs", 0, 1 << 20);
  st.chunk = static_cast<int>(cfg.integer("run.chunk", 1, 1 << 20));
  st.threads = static_cast<int>(cfg.integer("run.threads", 0, 4096));
  st.save_outputs = cfg.boolean("run.save_outputs");
  st.max_output_gb = cfg.real("run.max_output_gb", 0.0, 1e6);
  st.seed = static_cast<uint64_t>(cfg.integer("run.seed", 0, std::numeric_limits<long long>::max()));
  st.batch = static_cast<int>(cfg.integer("run.batch", 0, 1 << 20));
  st.kl = cfg.boolean("metrics.kl");
  st.vocab = static_cast<int>(cfg.integer("metrics.vocab", 2, 1 << 20));
  st.logit_std = cfg.real("metrics.logit_std", 1e-3, 1e3);
  st.state_err = cfg.boolean("metrics.state_error");
  st.state_every = static_cast<int>(cfg.integer("metrics.eager_state_every", 1, 1 << 20));
  return st;
}

}  // namespace rssm
