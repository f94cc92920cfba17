// A layer of one family: its parameters, the inputs it takes per step, and the named geometry presets of METHOD.md.
#pragma once

#include <string>
#include <vector>

#include "model/family.h"
#include "model/gdn.h"
#include "model/mamba2.h"

namespace rssm {

struct Model {
  Family family = Family::Mamba2;
  Mamba2Params mamba2;  // used when family == Mamba2
  GdnParams gdn;        // used when family == GDN
  // Speculative decoding's recorded acceptance, when the trace stores one (/spec/accepted): per sequence, the tokens
  // each successive verify window committed [seqs][windows]. Empty otherwise. Not a layer parameter, but it travels
  // with the trace's layer to the decoders, which only see the Model.
  std::vector<std::vector<int>> spec_accepted;

  // Inputs of one step, in the order traces store them.
  // Mamba-2: x [H,P], dt [H], B [G,N], C [G,N], z [H,P] (optional, present when has_z)
  // GDN:     q [HK,K], k [HK,K], v [HV,V], a [HV], b [HV]
  std::vector<InputSpec> inputs() const;
  int out_elems() const;         // per sequence and step: H·P or HV·V
  long long state_elems() const;  // per sequence: H·P·N or HV·V·K
  std::string geometry_string() const;  // "H=128 P=64 N=128 G=8" or "HK=16 HV=32 K=128 V=128"
  void validate(const char* where) const;
};

// A geometry with empty parameter vectors. Known names: see preset_names(). Throws ConfigError otherwise.
Model model_preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace rssm
