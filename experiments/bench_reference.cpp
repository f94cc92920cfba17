// Speed of the fp64 reference step against a plain memory copy of the same bytes, in one process.
// The reference must not be the bottleneck of sweeps: it should reach at least half the copy bandwidth.
// Bytes per step counted for both: the state read and written once (2 · 8 · state_elems · seqs); inputs are tiny.
//   build/experiments/bench_reference --benchmark_filter=super --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_out=bench.json   (one line)
// Compare the median bytes_per_second of BM_reference_step and BM_copy at the same geometry.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "model/model.h"
#include "cpu/reference.h"
#include "trace/synth.h"

namespace {

using namespace rssm;

struct Case {
  const char* preset;
  int seqs;
};
// Super-120B is the geometry the issue names. The batch makes 128 MB of fp64 state, four times the 32 MB L3 of
// the machines here: with 4 sequences (32 MB) the state stayed in L3 and the step "beat" a DRAM copy.
// Small is a seconds-long smoke case for ctest.
const Case kCases[] = {{"nemotron3-super-120b", 16}, {"qwen35-4b", 32}};

SynthConfig small_config(const Model& m, int seqs) {
  SynthConfig sc;
  sc.model = m;
  sc.steps = 8;
  sc.seqs = seqs;
  sc.seed = 7;
  return sc;
}

void run_reference(benchmark::State& st, const Model& geometry, int seqs) {
  SynthSource src(small_config(geometry, seqs));
  InputChunk in;
  src.read(0, 8, in);
  ReferenceDecoder ref;
  ref.reset(src.model(), seqs);
  std::vector<double> y(static_cast<size_t>(seqs) * src.model().out_elems());
  int s = 0;
  for (auto _ : st) {
    ref.advance(in, s, 1, y.data());
    s = (s + 1) % 8;
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = 2.0 * 8.0 * src.model().state_elems() * seqs;
  st.SetBytesProcessed(static_cast<int64_t>(bytes * st.iterations()));
  st.counters["threads"] = omp_get_max_threads();
}

void run_copy(benchmark::State& st, const Model& geometry, int seqs) {
  const size_t n = static_cast<size_t>(geometry.state_elems()) * seqs;
  std::vector<double> a(n, 1.0), b(n, 2.0);
  for (auto _ : st) {
    // Same threads as the reference, each copying its contiguous share.
#pragma omp parallel
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(double));
    }
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(2.0 * 8.0 * n * st.iterations()));
}

Model small_mamba2() {
  Model m;
  m.family = Family::Mamba2;
  m.mamba2.H = 8;
  m.mamba2.P = 16;
  m.mamba2.N = 32;
  m.mamba2.G = 2;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  for (const auto& c : kCases) {
    const Model m = model_preset(c.preset);
    benchmark::RegisterBenchmark((std::string("BM_reference_step/") + c.preset).c_str(), run_reference, m, c.seqs)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("BM_copy/") + c.preset).c_str(), run_copy, m, c.seqs)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_reference_step/Small", run_reference, small_mamba2(), 2)->UseRealTime();
  benchmark::RegisterBenchmark("BM_copy/Small", run_copy, small_mamba2(), 2)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
