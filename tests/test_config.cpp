// Config parsing and validation: every error names the key (and the file) and what is accepted.
#include <catch2/catch.hpp>

#include "errors.h"
#include "run/config.h"
#include "run/runner.h"
#include "run/sweep.h"
#include "test_util.h"

using namespace rssm;
using Catch::Matchers::Contains;

TEST_CASE("config: defaults, files and overrides", "[config]") {
  test::TempDir dir;
  Config c;
  CHECK(c.str("scheme.decoder") == "eager");
  CHECK(c.integer("run.chunk", 1, 100) == 64);
  test::write_text(dir / "a.ini", "[run]\nsteps = 12\n\n[scheme]\nstate_format = fp32, bf16\n");
  c.load_file(dir / "a.ini");
  CHECK(c.integer("run.steps", 0, 100) == 12);
  CHECK(c.list("scheme.state_format") == std::vector<std::string>{"fp32", "bf16"});
  c.set("run.steps=7");
  CHECK(c.integer("run.steps", 0, 100) == 7);
  CHECK_THAT(c.resolved_text(), Contains("[run]") && Contains("steps = 7"));
}

TEST_CASE("config: errors name the file, the key and what is accepted", "[config]") {
  test::TempDir dir;
  Config c;
  CHECK_THROWS_WITH(c.load_file(dir / "missing.ini"), Contains("missing.ini") && Contains("cannot open"));
  test::write_text(dir / "unknown.ini", "[run]\nstepz = 3\n");
  CHECK_THROWS_WITH(c.load_file(dir / "unknown.ini"),
                    Contains("unknown.ini") && Contains("run.stepz") && Contains("run.steps"));
  test::write_text(dir / "section.ini", "[rnu]\nsteps = 3\n");
  CHECK_THROWS_WITH(c.load_file(dir / "section.ini"), Contains("rnu.steps") && Contains("known sections"));
  test::write_text(dir / "twice.ini", "[run]\nsteps = 3\nsteps = 4\n");
  CHECK_THROWS_WITH(c.load_file(dir / "twice.ini"), Contains("run.steps") && Contains("more than once"));
  test::write_text(dir / "binary.ini", std::string("\x7f" "ELF\x01\x02\x00\x00", 8));
  CHECK_THROWS_WITH(c.load_file(dir / "binary.ini"), Contains("binary.ini") && Contains("not a text"));
  CHECK_THROWS_WITH(c.set("run.nope=1"), Contains("run.nope"));
  CHECK_THROWS_WITH(c.set("run.steps"), Contains("section.key=value"));
  c.set("run.steps=abc");
  CHECK_THROWS_WITH(c.integer("run.steps", 0, 10), Contains("'run.steps'") && Contains("integer") && Contains("abc"));
  c.set("run.steps=11");
  CHECK_THROWS_WITH(c.integer("run.steps", 0, 10), Contains("[0, 10]"));
  c.set("run.save_outputs=maybe");
  CHECK_THROWS_WITH(c.boolean("run.save_outputs"), Contains("true or false"));
  c.set("scheme.state_format=fp32,,bf16");
  CHECK_THROWS_WITH(c.list("scheme.state_format"), Contains("empty items"));
}

TEST_CASE("config: defaults.ini matches the program's key table", "[config]") {
  const std::string committed = test::read_text(std::string(REPLAYSSM_SOURCE_DIR) + "/configs/defaults.ini");
  INFO("regenerate with: build/experiments/replayssm defaults > configs/defaults.ini");
  CHECK(committed == Config::defaults_text());
  // And it parses: every key it lists is known.
  Config c;
  c.load_file(std::string(REPLAYSSM_SOURCE_DIR) + "/configs/defaults.ini");
  // The sweep mark comes from KeyDef::sweep alone: a help line that says "(sweep)" itself printed it twice.
  for (const auto& k : config_keys()) {
    INFO(k.key << ": " << k.help);
    CHECK(k.help.find("(sweep)") == std::string::npos);
    CHECK_THAT(Config::defaults_text(), Contains("# " + std::string(k.sweep ? "(sweep) " : "") + k.help + "\n"));
  }
  CHECK_THAT(committed, !Contains("(sweep) (sweep)"));
}

TEST_CASE("sweep: Cartesian product, stable ids, bad values and skipped combinations", "[config]") {
  Config c;
  c.set("scheme.state_format=fp32, bf16, e4m3");
  auto runs = expand_sweep(c, Family::Mamba2);
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].id == "run_0000");
  CHECK(runs[2].get("state_format") == "e4m3");
  CHECK(runs[0].skip_reason.empty());
  CHECK_THAT(runs[2].skip_reason, Contains("e4m3"));
  c.set("scheme.state_format=fp9");
  CHECK_THROWS_WITH(expand_sweep(c, Family::Mamba2), Contains("scheme.state_format") && Contains("fp9") && Contains("bf16"));
  c.set("scheme.state_format=fp32");
  c.set("scheme.decoder=magic");
  CHECK_THROWS_WITH(expand_sweep(c, Family::Mamba2), Contains("scheme.decoder") && Contains("magic"));
}

TEST_CASE("synth config: presets, custom geometry and contradictions", "[config]") {
  Config c;
  SynthConfig s = synth_config(c);
  CHECK(s.model.mamba2.H == 64);
  c.set("synth.H=8");
  CHECK_THROWS_WITH(synth_config(c), Contains("synth.H") && Contains("custom"));
  c.set("synth.preset=custom");
  CHECK_THROWS_WITH(synth_config(c), Contains("synth.P"));
  c.set("synth.P=4");
  c.set("synth.N=8");
  c.set("synth.G=3");
  CHECK_THROWS_WITH(synth_config(c), Contains("synth.G"));
  c.set("synth.G=2");
  CHECK(synth_config(c).model.mamba2.G == 2);
  c.set("synth.HK=2");
  CHECK_THROWS_WITH(synth_config(c), Contains("synth.HK"));
  c.set("synth.preset=qwen99");
  CHECK_THROWS_WITH(synth_config(c), Contains("synth.preset") && Contains("qwen35-4b"));
  Config d;
  d.set("synth.dt_min=0.5");
  d.set("synth.dt_max=0.1");
  CHECK_THROWS_WITH(synth_config(d), Contains("dt_min"));
}
