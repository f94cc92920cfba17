// Trace files, format v1 (docs/trace_format.md is the specification): a streaming reader, a writer, and
// per-dataset statistics for `replayssm inspect`.
// The reader validates everything but the input values when it opens a file, so a bad file fails at once with one
// line naming the file, the dataset or attribute and the problem; input values are checked (finite) chunk by chunk
// as they are read, because a trace may be far larger than memory.
// Not here: the in-memory trace and the TraceSource interface (trace.h), synthetic traces (synth.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace rssm {

// How write_trace stores the inputs. Parameters are always float64, the readout always float32.
enum class InputStorage { FP32, BF16 };
std::string input_storage_name(InputStorage s);             // "fp32", "bf16"
InputStorage parse_input_storage(const std::string& name);  // throws ConfigError listing the accepted names

// bfloat16 inputs are stored as uint16 holding the upper half of the fp32 pattern, rounded to nearest even when
// written: numeric/bits.h's float_to_bf16_bits / bf16_bits_to_float, the same rounding the decoders emulate.

struct TraceInfo;

// A trace file opened for streaming reads. Holds the file open; reads hyperslabs, never the whole file.
class H5TraceSource : public TraceSource {
 public:
  // Opens and validates `path` (format, version, family, geometry, parameters, input shapes and types, readout).
  // Throws FormatError with one line naming the file, the dataset or attribute, and the problem.
  explicit H5TraceSource(const std::string& path);
  ~H5TraceSource() override;
  H5TraceSource(const H5TraceSource&) = delete;
  H5TraceSource& operator=(const H5TraceSource&) = delete;

  const Model& model() const override;
  long long steps() const override;
  int seqs() const override;
  // Reads steps [step0, step0 + nsteps) of every input (stored fp32 or bf16, returned as float) and checks that
  // every value is finite; the error names the file, dataset, step, sequence and index.
  // out.data[i]: [nsteps, seqs, ...dims of input i], e.g. x: [step, seq, H, P], dt: [step, seq, H]
  void read(long long step0, int nsteps, InputChunk& out) override;
  const std::vector<float>& readout() const override;  // [vocab, out_elems], or empty
  int readout_vocab() const override;
  std::string describe() const override;  // "trace file PATH"

  const std::string& path() const;
  const std::string& description() const;  // the optional `description` attribute, or ""
  InputStorage storage(int input) const;   // how input i of Model::inputs() is stored

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend TraceInfo inspect_trace(const std::string& path, int chunk_steps);  // reads without the finite check
};

// Opens `path` in a short-lived child process first (the validation of H5TraceSource plus reads of the first and last
// steps), so that a file on which libhdf5 itself faults or hangs (docs/trace_format.md, "Hostile and corrupt files")
// stops the caller with a FormatError naming the file instead of killing it. Returns quietly when the child
// survives, whatever it found: the caller's own open then reports ordinary format errors itself. Nothing is probed
// when `path` is not a regular file. Forks: call it before the process starts threads (the CLI does, first thing).
void probe_trace_file(const std::string& path);

// Streams `src` into a new trace file at `path`, chunk_steps steps at a time (also the HDF5 chunk length along
// the step axis). Writes `path`.tmp and renames it at the end; on any error the temporary file is removed and
// `path` is left untouched. Equal inputs give byte-identical files (no timestamps, fixed chunking and deflate).
// Non-finite inputs are refused (FormatError naming the source, dataset, step, sequence, index).
void write_trace(const std::string& path, TraceSource& src, InputStorage storage, int chunk_steps = 64);

// Statistics of one dataset, computed chunk by chunk over finite values (non-finite ones are counted apart).
struct DatasetStats {
  std::string name;              // "/inputs/x", "/params/A_log", "/readout"
  std::vector<long long> shape;  // e.g. [steps, seqs, H, P]
  std::string dtype;             // "float32", "bfloat16", "float64"
  long long count = 0;           // finite values
  long long nonfinite = 0;
  double min = 0, max = 0, mean = 0, std = 0;  // over finite values; std is the population standard deviation
  double mean_abs = 0;
};

struct TraceInfo {
  std::string path;
  int version = 0;
  std::string family;
  std::string geometry;  // Model::geometry_string()
  std::string flags;     // "has_z=0 d_per_dim=0 dt_min=0 dt_max=inf" or "eps=1e-06"
  long long steps = 0;
  int seqs = 0;
  std::string description;
  std::vector<DatasetStats> datasets;  // params, then inputs in Model::inputs() order, then the readout
};

// Validates the file as H5TraceSource does, then computes statistics of every dataset (inputs read chunk_steps
// steps at a time). Non-finite input values are counted, not thrown.
TraceInfo inspect_trace(const std::string& path, int chunk_steps = 256);
// Readable text, one line per entry: a header, then an aligned table of the datasets.
std::vector<std::string> format_trace_info(const TraceInfo& info);

}  // namespace rssm
