// Scheme: one sweep point's decoding scheme, parsed once from the point's key/value parameters into plain typed
// fields. Everything downstream (the decoder factory, the tolerance table, the traffic model, decoder names and
// result attributes) reads this struct; nothing re-parses the strings.
// A scheme is what a decoder computes, not how it is run: seeds, step counts and batch sizes live elsewhere.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "decoder/spec.h"
#include "numeric/arith.h"
#include "numeric/format.h"

namespace rssm {

enum class Backend { Cpu, Cuda };
enum class DecoderKind { Eager, Replay, Dual };
// GDN replay routes (METHOD.md): inner products against the checkpoint, or rebuilding the state.
enum class GdnRoute { Inner, Reconstruct };

std::string backend_name(Backend b);            // "cpu", "cuda"
Backend parse_backend(const std::string& s);    // throws ConfigError listing the accepted names
std::string decoder_kind_name(DecoderKind k);   // "eager", "replay", "dual"
DecoderKind parse_decoder_kind(const std::string& s);
std::string gdn_route_name(GdnRoute r);          // "inner", "reconstruct"
GdnRoute parse_gdn_route(const std::string& s);  // throws ConfigError

struct Scheme {
  Backend backend = Backend::Cpu;
  DecoderKind decoder = DecoderKind::Eager;
  Format state_format = Format::FP32;   // eager: the state; replay: the shared checkpoint; dual: the update copy
  Format read_format = Format::BF16;    // dual: the read copy every step's output reads
  Format buffer_format = Format::BF16;  // replay/dual: buffered x, B (Mamba-2) / u, k (GDN)
  Format act_format = Format::BF16;     // inputs are rounded to it before any decoder (the reference included)
  Format out_format = Format::FP32;     // every output y is rounded to it (nearest-even) before it leaves a decoder
  Arith dot_arith = Arith::FP32;        // replay/dual: the output dots
  Arith flush_arith = Arith::FP32;      // replay/dual: the flush's rank-K update
  Rounding rounding = Rounding::Nearest;  // state / checkpoint stores
  int interval = 8;                       // replay/dual: flush every `interval` steps
  int buffer_len = 0;                     // replay/dual: ring capacity (0 = interval); memory and traffic only
  GdnRoute route = GdnRoute::Inner;       // GDN replay/dual
  // Speculative decoding (decoder/spec.h), the [spec] section: verify windows of `window` positions (0 = standard
  // decoding, one token per step) and how many tokens each window commits. Eager schemes become the eager
  // speculative baseline (a state per draft), replay / dual schemes verify from the checkpoint plus the ring.
  int window = 0;
  Acceptance acceptance;

  bool replays() const { return decoder != DecoderKind::Eager; }
  bool dual() const { return decoder == DecoderKind::Dual; }
  bool speculative() const { return window > 0; }
  // Speculative replay: the ring's logical size L_hist (buffer_len, or interval + window when 0) that the early-flush
  // rule reads.
  int spec_hist() const { return buffer_len > 0 ? buffer_len : interval + window; }

  // Unique, stable name of the scheme: backend, decoder kind and every parameter that changes its outputs
  // (buffer_len does not, except as a speculative ring's L_hist, which moves flushes; act_format does, through the
  // inputs). "cpu:replay-bf16-K8-buf_bf16-dot_fp32-flush_fp32-route_inner-rn-out_fp32-act_bf16"; speculative schemes
  // add "-spec_T4_prob:0.7" (replay: "-spec_T4_L20_prob:0.7"). Decoders name themselves by decoder_name(), the same without act_format
  // (a decoder never sees the activation rounding: the runner applies it).
  std::string name() const;
  std::string decoder_name() const;
  // Short label for tables: "replay-bf16-K8", "dual-fp32+bf16-K8", "replay-fp32-K16-flush_tf32" (dot / flush
  // arithmetic named when not fp32), prefixed "cuda:" on the cuda backend.
  std::string label() const;
  // The same point on another backend.
  Scheme with_backend(Backend b) const {
    Scheme s = *this;
    s.backend = b;
    return s;
  }
};

// Config bounds of the integer keys. They only keep numbers sane: a backend's own limits (the CPU decoders' stack
// buffer, a kernel's shared memory) are skip reasons of that backend's combination check, not config errors.
constexpr long long kMaxSchemeInterval = 1 << 16;
constexpr long long kMaxSchemeBufferLen = 1 << 20;
constexpr long long kMaxSchemeWindow = 64;

// The config key of a scheme parameter: "spec.window", "spec.acceptance", else "scheme.<key>".
std::string scheme_config_key(const std::string& key);

// Parses a sweep point's parameters (sweep key without "scheme." -> value). Keys not listed keep the defaults
// above; an unknown key is an InternalError (the config table declares them). A bad value throws ConfigError
// "config key 'scheme.<key>': ... (got '<value>')". Formats are checked per key (act: fp32/bf16/fp16; buffers
// and outputs: fp64/fp32/bf16/fp16; tf32 only as an arithmetic).
Scheme parse_scheme(const std::vector<std::pair<std::string, std::string>>& params);
// Checks one key's value alone (what parse_scheme does per key); the sweep checks every listed value with it.
void check_scheme_value(const std::string& key, const std::string& value);

}  // namespace rssm
