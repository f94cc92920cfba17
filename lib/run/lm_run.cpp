// run_lm_experiment: see lm_run.h. One fp64 reference run of the model per config, then each sweep point in turn
// (one process, points one after another: a point decodes the whole network, and its decoders already use the
// cores through OpenMP). The result file is rewritten after every point, like layer runs after every batch.
#include "run/lm_run.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cpu/reference.h"
#include "errors.h"
#include "io/results.h"
#include "lm/forward.h"
#include "lm/next_byte.h"
#include "lm/sha256.h"
#include "lm/weights.h"
#include "metrics/readout.h"
#include "run/factory.h"
#include "run/provenance.h"
#include "run/sweep.h"

namespace rssm {

namespace {

struct LmSettings {
  std::string weights, text, mode, output;
  int seqs = 1;
  long long steps = 0;   // teacher: bytes read per sequence; free: bytes generated after the prompt
  long long prompt = 0;  // free: bytes of text read first
  LmPrecision network = LmPrecision::FP32;
  uint64_t seed = 0;
};

LmSettings read_lm_settings(const Config& cfg) {
  LmSettings s;
  s.weights = cfg.str("model.weights");
  s.text = cfg.str("model.text");
  s.mode = cfg.choice("model.mode", {"teacher", "free"});
  s.seqs = static_cast<int>(cfg.integer("model.seqs", 1, 4096));
  s.steps = cfg.integer("model.steps", 1, 1LL << 24);
  s.prompt = cfg.integer("model.prompt", 1, 1LL << 24);
  s.network = parse_lm_precision(cfg.choice("model.network", {"fp32", "fp64"}));
  s.seed = static_cast<uint64_t>(cfg.integer("run.seed", 0, (1LL << 62)));
  s.output = cfg.str("run.output");
  return s;
}

std::string read_file_bytes(const std::string& path, const char* key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot read the text file of config key '{}'", path, key));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The bytes each sequence reads: `need` bytes from evenly spaced offsets of the text.
std::vector<std::vector<int>> windows(const std::string& text, const LmSettings& s, long long need, const char* key) {
  const long long n = static_cast<long long>(text.size());
  if (n < need)
    throw ConfigError(fmt::format("config key '{}': {} needs {} bytes of text per sequence, but model.text '{}' has {}",
                                  key, s.mode == "teacher" ? "teacher-forced decoding of model.steps" : "the prompt",
                                  need, s.text, n));
  std::vector<std::vector<int>> w(static_cast<size_t>(s.seqs));
  for (int q = 0; q < s.seqs; ++q) {
    const long long off = s.seqs > 1 ? (n - need) * q / (s.seqs - 1) : 0;
    for (long long t = 0; t < need; ++t) w[q].push_back(static_cast<unsigned char>(text[static_cast<size_t>(off + t)]));
  }
  return w;
}

std::vector<std::unique_ptr<Decoder>> decoders_for(const LmWeights& w, const Scheme* scheme, uint64_t seed) {
  std::vector<std::unique_ptr<Decoder>> v;
  for (int i : w.ssm_layers()) {
    if (scheme == nullptr)
      v.push_back(std::make_unique<ReferenceDecoder>());
    else
      v.push_back(make_decoder(*scheme, w.ssm_model(i).family, seed));
  }
  return v;
}

// Teacher-forced run: logits [steps, seqs, vocab].
std::vector<double> teacher_logits(LmForward& f, const std::vector<std::vector<int>>& win, long long steps, int vocab,
                                   const std::string& what, bool progress) {
  const int seqs = f.seqs();
  std::vector<double> out(static_cast<size_t>(steps) * seqs * vocab);
  std::vector<int> tok(static_cast<size_t>(seqs));
  for (long long t = 0; t < steps; ++t) {
    for (int q = 0; q < seqs; ++q) tok[q] = win[q][static_cast<size_t>(t)];
    if (stop_requested()) throw Interrupted(fmt::format("interrupted in {} at step {}", what, t));
    f.step(tok.data(), &out[static_cast<size_t>(t) * seqs * vocab]);
    if (progress && (t % 256 == 255 || t == steps - 1)) fmt::print(stderr, "\r{}: step {}/{}   ", what, t + 1, steps);
  }
  if (progress) fmt::print(stderr, "\n");
  return out;
}

// Free-running: reads the prompt, then generates `steps` bytes greedily; returns them [seqs][steps].
std::vector<std::vector<int>> generate(LmForward& f, const std::vector<std::vector<int>>& prompt, long long steps,
                                       int vocab, const std::string& what, bool progress) {
  const int seqs = f.seqs();
  std::vector<double> logits(static_cast<size_t>(seqs) * vocab);
  std::vector<int> tok(static_cast<size_t>(seqs));
  const long long plen = static_cast<long long>(prompt[0].size());
  std::vector<std::vector<int>> gen(static_cast<size_t>(seqs));
  for (long long t = 0; t < plen + steps - 1; ++t) {
    for (int q = 0; q < seqs; ++q) tok[q] = t < plen ? prompt[q][static_cast<size_t>(t)] : gen[q].back();
    if (stop_requested()) throw Interrupted(fmt::format("interrupted in {} at step {}", what, t));
    f.step(tok.data(), logits.data());
    if (t >= plen - 1)
      for (int q = 0; q < seqs; ++q) {
        const double* l = &logits[static_cast<size_t>(q) * vocab];
        gen[q].push_back(static_cast<int>(std::max_element(l, l + vocab) - l));
      }
    if (progress && (t % 256 == 255 || t == plen + steps - 2))
      fmt::print(stderr, "\r{}: step {}/{}   ", what, t + 1, plen + steps - 1);
  }
  if (progress) fmt::print(stderr, "\n");
  return gen;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

AttrValue param_value(const std::string& key, const std::string& v) {
  if (integer_sweep_key(key)) return std::stoll(v);
  return v;
}

// The per-layer study's readout proxy, computed here so that it ranks the same points as the end-to-end KL: each SSM
// layer's inputs as the fp64 reference run fed them (teacher-forced, like a recorded trace), rounded to the point's
// act_format, go through the scheme's decoder and the fp64 reference decoder alone, and the two outputs through that
// layer's readout W = head · out_proj · diag(norm weight), as scripts/train_tiny_hybrid.py writes into traces.
struct ProxyLayer {
  Model model;
  std::vector<std::vector<float>> inputs;  // per input: [steps, seqs, elems], fp32 values from the reference run
  std::vector<float> readout;              // [vocab, out_elems]
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> ref;  // act -> (y_ref, ref logits)
};

std::vector<float> layer_readout(const LmWeights& w, int layer, int out_elems) {
  const LmLayer& L = w.layers[static_cast<size_t>(layer)];
  const int d = w.hp.d_model, vocab = w.hp.vocab;
  std::vector<float> W(static_cast<size_t>(vocab) * out_elems);
  for (int v = 0; v < vocab; ++v)
    for (int c = 0; c < out_elems; ++c) {
      double acc = 0;
      for (int k = 0; k < d; ++k)
        acc += w.head.data[static_cast<size_t>(v) * d + k] * L.out_proj.data[static_cast<size_t>(k) * out_elems + c];
      W[static_cast<size_t>(v) * out_elems + c] = static_cast<float>(acc * L.norm_weight[c % L.norm_weight.size()]);
    }
  return W;
}

// Mean readout KL over steps, sequences and SSM layers of `scheme` on the recorded inputs.
double proxy_kl(std::vector<ProxyLayer>& layers, const Scheme& scheme, long long steps, int seqs, uint64_t seed) {
  double sum = 0;
  for (auto& pl : layers) {
    InputChunk chunk;
    chunk.shape(pl.model, 0, static_cast<int>(steps), seqs);
    for (size_t i = 0; i < chunk.data.size(); ++i)
      for (size_t e = 0; e < chunk.data[i].size(); ++e) {
        const float v = pl.inputs[i][e];
        chunk.data[i][e] = (scheme.act_format == Format::FP32 || scheme.act_format == Format::FP64)
                               ? v
                               : round_nearest(scheme.act_format, v);
      }
    const int out = pl.model.out_elems();
    const size_t rows = static_cast<size_t>(steps) * seqs;
    Readout R(pl.readout, 0, out, seed);
    auto advance_all = [&](Decoder& dec, std::vector<double>& y) {
      dec.reset(pl.model, seqs);
      y.assign(rows * out, 0.0);
      for (long long s0 = 0; s0 < steps; s0 += 64) {
        const int n = static_cast<int>(std::min<long long>(64, steps - s0));
        dec.advance(chunk, static_cast<int>(s0), n, &y[static_cast<size_t>(s0) * seqs * out]);
      }
    };
    auto& ref = pl.ref[format_name(scheme.act_format)];
    if (ref.first.empty()) {
      ReferenceDecoder rd;
      advance_all(rd, ref.first);
      R.logits(ref.first.data(), static_cast<int>(rows), ref.second);
    }
    std::vector<double> y;
    auto dec = make_decoder(scheme, pl.model.family, seed);
    advance_all(*dec, y);
    std::vector<double> kl(rows), top1(rows);
    R.compare(ref.second, y.data(), ref.first.data(), static_cast<int>(rows), kl.data(), top1.data());
    sum += mean(kl) / static_cast<double>(layers.size());
  }
  return sum;
}

// Spearman's rank correlation (average ranks on ties); NaN below 3 points.
double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = a.size();
  if (n < 3) return NAN;
  auto ranks = [n](const std::vector<double>& x) {
    std::vector<size_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t i, size_t j) { return x[i] < x[j]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && x[idx[j + 1]] == x[idx[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * static_cast<double>(i + j);
      i = j + 1;
    }
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  const double ma = mean(ra), mb = mean(rb);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : NAN;
}

const std::vector<long long> kIdenticalAfter = {256, 1024, 4096};

}  // namespace

bool lm_configured(const Config& cfg) { return !cfg.str("model.weights").empty(); }

std::string run_lm_experiment(const Config& cfg, std::ostream& out, const RunnerOptions& opts) {
  const LmSettings s = read_lm_settings(cfg);
  // Every step calls each SSM layer's decoder once for a handful of sequences: on small layers OpenMP's fork/join
  // costs more than the work (2-5x slower than one thread on 2 busy cores), so run.threads = 1 is the usual choice.
  const long long threads = cfg.integer("run.threads", 0, 4096);
  if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
  const LmWeights w = load_lm_weights(s.weights);
  const std::string text = read_file_bytes(s.text, "model.text");
  const int vocab = w.hp.vocab;
  const bool teacher = s.mode == "teacher";
  const auto win = teacher ? windows(text, s, s.steps + 1, "model.steps") : windows(text, s, s.prompt, "model.prompt");
  for (const auto& q : win)
    for (int b : q)
      if (b >= vocab) throw FormatError(fmt::format("{}: byte {} is outside the model's vocabulary", s.text, b));

  // Points: expanded for GDN (its route axis matters here); a point either family's backend cannot run is skipped.
  std::vector<RunSpec> specs = expand_sweep(cfg, Family::GDN);
  for (auto& sp : specs)
    if (sp.skip_reason.empty()) sp.skip_reason = backend_unavailable_reason(sp.scheme, Family::Mamba2);

  ResultSet rs;
  rs.root = provenance_attrs();
  for (const auto& a : opts.extra_root_attrs) rs.root.push_back(a);
  rs.root.emplace_back("config", cfg.resolved_text());
  rs.root.emplace_back("family", std::string("lm"));
  rs.root.emplace_back("trace", std::string("model:") + s.weights);
  rs.root.emplace_back(
      "geometry",
      fmt::format("layout={} d_model={} Mamba-2 H={} P={} N={} G={}; GDN HK={} HV={} K={} V={}", w.hp.layout,
                  w.hp.d_model, w.hp.m_H, w.hp.m_P, w.hp.m_N, w.hp.m_G, w.hp.g_HK, w.hp.g_HV, w.hp.g_K, w.hp.g_V));
  rs.root.emplace_back("model_weights", s.weights);
  rs.root.emplace_back("model_weights_sha256", w.sha256);
  rs.root.emplace_back("model_description", w.description);
  rs.root.emplace_back("model_text", s.text);
  rs.root.emplace_back("model_text_sha256", sha256_bytes(text));
  rs.root.emplace_back("mode", s.mode);
  rs.root.emplace_back("steps", s.steps);
  rs.root.emplace_back("seqs", static_cast<long long>(s.seqs));
  rs.root.emplace_back("network", lm_precision_name(s.network));
  rs.root.emplace_back("reference",
                       std::string("the same model with an fp64 network and the fp64 reference decoder in every SSM "
                                   "layer (SSM inputs pass as fp32 values); schemes run the network in model.network "
                                   "and round SSM inputs to act_format"));

  // The fp64 reference.
  LmForward ref(w, LmPrecision::FP64, Format::FP32, decoders_for(w, nullptr, s.seed), s.seqs);
  std::vector<double> ref_logits, ref_bits;
  std::vector<std::vector<int>> ref_gen;
  std::vector<ProxyLayer> proxy;
  if (teacher) {
    for (int li : w.ssm_layers()) {
      ProxyLayer pl;
      pl.model = w.ssm_model(li);
      pl.inputs.resize(pl.model.inputs().size());
      pl.readout = layer_readout(w, li, pl.model.out_elems());
      proxy.push_back(std::move(pl));
    }
    ref.record_inputs([&proxy](int j, const InputChunk& c) {
      auto& in = proxy[static_cast<size_t>(j)].inputs;
      for (size_t i = 0; i < c.data.size(); ++i) in[i].insert(in[i].end(), c.data[i].begin(), c.data[i].end());
    });
    ref_logits = teacher_logits(ref, win, s.steps, vocab, "reference fp64", opts.progress);
    ref_bits.assign(static_cast<size_t>(s.steps), 0.0);
    for (long long t = 0; t < s.steps; ++t)
      for (int q = 0; q < s.seqs; ++q)
        ref_bits[t] += code_bits(&ref_logits[(static_cast<size_t>(t) * s.seqs + q) * vocab], vocab,
                                 win[q][static_cast<size_t>(t + 1)]) /
                       s.seqs;
    rs.root.emplace_back("ref_bits_per_byte", mean(ref_bits));
  } else {
    ref_gen = generate(ref, win, s.steps, vocab, "reference fp64", opts.progress);
  }

  std::vector<long long> step_index(static_cast<size_t>(s.steps));
  for (long long t = 0; t < s.steps; ++t) step_index[t] = t;
  std::vector<double> e2e_kl, layer_kl;  // teacher: per point that ran, for the rank correlation
  for (const RunSpec& sp : specs) {
    RunRecord r;
    r.id = sp.id;
    AttrMap& sm = r.summary;
    sm.emplace_back("run", sp.id);
    sm.emplace_back("decoder_label", sp.scheme.label());
    sm.emplace_back("scheme", sp.scheme.name());
    for (const auto& [k, v] : sp.params) sm.emplace_back(k, param_value(k, v));
    sm.emplace_back("status", std::string(sp.skip_reason.empty() ? "ok" : "skipped"));
    sm.emplace_back("skip_reason", sp.skip_reason);
    if (!sp.skip_reason.empty()) {
      rs.runs.push_back(std::move(r));
      continue;
    }
    r.attrs = {{"id", sp.id},
               {"decoder_label", sp.scheme.label()},
               {"scheme", sp.scheme.name()},
               {"network", lm_precision_name(s.network)}};
    for (const auto& [k, v] : sp.params) r.attrs.emplace_back(k, param_value(k, v));
    const std::string what = fmt::format("{} {}", sp.id, sp.scheme.label());
    try {
      LmForward f(w, s.network, sp.scheme.act_format, decoders_for(w, &sp.scheme, s.seed), s.seqs);
      r.attrs.emplace_back("decoder_name", f.decoders().front()->name());
      if (teacher) {
        const auto lg = teacher_logits(f, win, s.steps, vocab, what, opts.progress);
        std::vector<double> kl_mean(s.steps), kl_max(s.steps), top1(s.steps), bits(s.steps);
        for (long long t = 0; t < s.steps; ++t)
          for (int q = 0; q < s.seqs; ++q) {
            const size_t o = (static_cast<size_t>(t) * s.seqs + q) * vocab;
            const NextByte nb = compare_next_byte(&ref_logits[o], &lg[o], vocab, win[q][static_cast<size_t>(t + 1)]);
            kl_mean[t] += nb.kl / s.seqs;
            kl_max[t] = std::max(kl_max[t], nb.kl);
            top1[t] += (nb.top1_agree ? 1.0 : 0.0) / s.seqs;
            bits[t] += nb.test_bits / s.seqs;
          }
        r.groups.push_back({"step",
                            step_index,
                            {{"kl_mean", kl_mean},
                             {"kl_max", kl_max},
                             {"top1_agree", top1},
                             {"bits_per_byte", bits},
                             {"ref_bits_per_byte", ref_bits}}});
        sm.emplace_back("kl_mean", mean(kl_mean));
        sm.emplace_back("kl_max", *std::max_element(kl_max.begin(), kl_max.end()));
        sm.emplace_back("top1_agree", mean(top1));
        sm.emplace_back("bits_per_byte", mean(bits));
        sm.emplace_back("ref_bits_per_byte", mean(ref_bits));
        sm.emplace_back("delta_bits_per_byte", mean(bits) - mean(ref_bits));
        const double pk = proxy_kl(proxy, sp.scheme, s.steps, s.seqs, s.seed);
        sm.emplace_back("proxy_kl_mean", pk);
        e2e_kl.push_back(mean(kl_mean));
        layer_kl.push_back(pk);
      } else {
        const auto gen = generate(f, win, s.steps, vocab, what, opts.progress);
        std::vector<double> first(static_cast<size_t>(s.seqs)), identical(static_cast<size_t>(s.steps), 0.0);
        std::vector<long long> seq_index(static_cast<size_t>(s.seqs));
        for (int q = 0; q < s.seqs; ++q) {
          long long j = 0;
          while (j < s.steps && gen[q][j] == ref_gen[q][j]) ++j;
          first[q] = static_cast<double>(j);  // = steps when never different
          seq_index[q] = q;
          for (long long t = 0; t < j; ++t) identical[t] += 1.0 / s.seqs;
        }
        r.groups.push_back({"step", step_index, {{"identical_share", identical}}});
        r.groups.push_back({"sequence", seq_index, {{"first_divergence", first}}});
        sm.emplace_back("first_divergence_mean", mean(first));
        sm.emplace_back("first_divergence_min", *std::min_element(first.begin(), first.end()));
        for (long long n : kIdenticalAfter) {
          double share = NAN;
          if (n <= s.steps) {
            share = 0;
            for (double fd : first) share += (fd >= static_cast<double>(n) ? 1.0 : 0.0) / s.seqs;
          }
          sm.emplace_back(fmt::format("identical_after_{}", n), share);
        }
      }
    } catch (const LmNumericError& e) {
      throw LmNumericError(fmt::format("{} ({}): {}", sp.id, sp.scheme.label(), e.what()));
    }
    rs.runs.push_back(std::move(r));
    write_result_file(s.output, rs);
  }
  const double rho = spearman(e2e_kl, layer_kl);
  if (teacher) rs.root.emplace_back("proxy_rank_correlation", rho);
  write_result_file(s.output, rs);

  // The table.
  out << fmt::format("model: {} ({}), {} x {} steps, mode {}, network {}\n", s.weights, w.hp.layout, s.seqs, s.steps,
                     s.mode, lm_precision_name(s.network));
  if (teacher) {
    out << fmt::format("fp64 reference: {:.4f} bits/byte\n\n", mean(ref_bits));
    out << fmt::format("{:<9} {:<24} {:>10} {:>10} {:>7} {:>9} {:>10} {:>10}\n", "run", "decoder", "KL mean", "KL max",
                       "top1", "bits/B", "d bits/B", "proxy KL");
  } else {
    out << fmt::format("\n{:<9} {:<24} {:>10} {:>8} {:>8} {:>8} {:>8}\n", "run", "decoder", "1st div", "min", "=@256",
                       "=@1024", "=@4096");
  }
  auto num = [](const AttrMap& row, const std::string& k) -> double {
    for (const auto& [kk, v] : row)
      if (kk == k && std::holds_alternative<double>(v)) return std::get<double>(v);
    return NAN;
  };
  for (const auto& r : rs.runs) {
    std::string label, reason;
    for (const auto& [k, v] : r.summary) {
      if (k == "decoder_label") label = std::get<std::string>(v);
      if (k == "skip_reason") reason = std::get<std::string>(v);
    }
    if (!reason.empty()) {
      out << fmt::format("{:<9} {:<24} skipped: {}\n", r.id, label, reason);
    } else if (teacher) {
      out << fmt::format("{:<9} {:<24} {:>10.3e} {:>10.3e} {:>7.4f} {:>9.4f} {:>+10.2e} {:>10.3e}\n", r.id, label,
                         num(r.summary, "kl_mean"), num(r.summary, "kl_max"), num(r.summary, "top1_agree"),
                         num(r.summary, "bits_per_byte"), num(r.summary, "delta_bits_per_byte"),
                         num(r.summary, "proxy_kl_mean"));
    } else {
      out << fmt::format("{:<9} {:<24} {:>10.1f} {:>8.0f} {:>8.3f} {:>8.3f} {:>8.3f}\n", r.id, label,
                         num(r.summary, "first_divergence_mean"), num(r.summary, "first_divergence_min"),
                         num(r.summary, "identical_after_256"), num(r.summary, "identical_after_1024"),
                         num(r.summary, "identical_after_4096"));
    }
  }
  if (teacher)
    out << fmt::format(
        "\nrank correlation of the per-layer readout proxy with the end-to-end KL (Spearman, {} points): "
        "{:.3f}\n",
        e2e_kl.size(), rho);
  out << fmt::format("\nwrote {}\n", s.output);
  return s.output;
}

}  // namespace rssm
