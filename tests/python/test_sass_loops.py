"""scripts/sass_loops.py on a hand-written nvdisasm listing (no CUDA tools needed): instruction classes, loops found
from backward branches only, the source lines a loop is attributed to, NOPs not counted, and the tool's refusals."""
import collections
import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sass_loops.py"
_spec = importlib.util.spec_from_file_location("sass_loops", SCRIPT)
sass = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass)

LISTING = """
//--------------------- .text._Z3fooPf --------------------------
	.section	.text._Z3fooPf,"ax",@progbits
_Z3fooPf:
	//## File "/src/k.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_1:
	//## File "/src/k.cu", line 12
        /*0020*/                   LDG.E.EF.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   FFMA R8, R4, R5, R8 ;
        /*0040*/                   SHFL.BFLY PT, R9, R8, 0x10, 0x1f ;
        /*0050*/                   NOP ;
	//## File "/src/dev.cuh", line 3
        /*0060*/                   IADD3 R2, P0, R2, 0x800, RZ ;
        /*0070*/              @!P0 BRA `(.L_x_2) ;
        /*0080*/               @P1 BRA `(.L_x_1) ;
.L_x_2:
	//## File "/src/k.cu", line 20
        /*0090*/                   F2FP.BF16.F32.PACK_AB R10, RZ, R8 ;
        /*00a0*/                   STG.E.U16 desc[UR4][R6.64], R10 ;
        /*00b0*/                   UIADD3 UR4, UR4, 0x1, URZ ;
        /*00c0*/                   EXIT ;
"""


def test_classes_loops_and_lines():
    kernels = sass.parse_text(LISTING)
    assert list(kernels) == ["_Z3fooPf"]
    insns = kernels["_Z3fooPf"]
    assert len(insns) == 12  # the NOP is not counted
    classes = collections.Counter(c for _, _, c, _, _ in insns)
    assert classes == {"const": 1, "int": 2, "ld.global": 1, "fp32": 1, "shuffle": 1, "branch": 3, "convert": 1,
                       "st.global": 1, "uniform": 1}
    # One loop: the branch at 0x80 back to .L_x_1 (0x20); the forward branch at 0x70 makes none.
    found = sass.loops(insns)
    assert [(insns[a][0], insns[b][0]) for a, b in found] == [(0x20, 0x80)]
    a, b = found[0]
    lines = collections.Counter(s for _, _, _, s, _ in insns[a:b + 1])
    assert lines == {("k.cu", 12): 3, ("dev.cuh", 3): 3}


def test_predicated_instructions_keep_their_class():
    assert sass.classify("@!P0 BRA `(.L_x_2)") == "branch"
    assert sass.classify("@P0 LDG.E.EF.128 R72, desc[UR46][R44.64]") == "ld.global"
    assert sass.classify("@!UP1 UIADD3 UR4, UR4, -UR9, URZ") == "uniform"
    assert sass.classify("CCTL.E.PF2 [R36+0x4000]") == "ld.global"
    assert sass.classify("CS2R R72, SRZ") == "int"


def test_refusals():
    r = subprocess.run([sys.executable, str(SCRIPT), "/no/such.o"], capture_output=True, text=True)
    assert r.returncode == 2 and "/no/such.o: no such file" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--kernel", "(", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 2 and "--kernel: not a regular expression" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 2 and "--compare takes two files" in r.stderr


def test_compare_pairs_loops_and_names_the_builds():
    import re
    pattern = re.compile("")
    old = sass.summarise_kernels(sass.parse_text(LISTING), pattern, 1, 2)
    # The new build: one instruction fewer in the loop (the SHFL gone), one more after it.
    new_listing = LISTING.replace("        /*0040*/                   SHFL.BFLY PT, R9, R8, 0x10, 0x1f ;\n", "")
    new_listing = new_listing.replace("        /*00c0*/                   EXIT ;",
                                      "        /*00c0*/                   FADD R1, R1, R1 ;\n"
                                      "        /*00d0*/                   EXIT ;")
    new = sass.summarise_kernels(sass.parse_text(new_listing), pattern, 1, 2)
    lines = sass.compare_summaries(old, new, ("before", "after"))
    name = list(old)[0]
    assert lines[0] == name
    assert lines[1] == "  12 -> 12 instructions (fp32 +1, shuffle -1)"
    assert lines[2].startswith("  before: loop 0x0020-0x0080: 6 instructions")
    assert lines[3].startswith("  after: loop 0x0020-0x0080: 5 instructions")
    assert len(lines) == 4
    # An unchanged build: only the kernel's line and its total.
    assert sass.compare_summaries(old, old, ("a", "b"))[1] == "  12 -> 12 instructions (no class changed)"


FAST_PATH = """
//--------------------- .text._Z3barv --------------------------
_Z3barv:
	//## File "/src/k.cu", line 5
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
.L_x_9:
        /*0010*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0020*/               @P0 BRA `(.L_x_2) ;
        /*0030*/                   CS2R R4, SRZ ;
        /*0040*/                   CS2R R6, SRZ ;
        /*0050*/               @P1 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0060*/                   BRA `(.L_x_3) ;
.L_x_2:
        /*0070*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
.L_x_3:
        /*0080*/                   FFMA R8, R4, R5, R8 ;
        /*0090*/               @P2 BRA `(.L_x_9) ;
        /*00a0*/                   EXIT ;
"""


def test_two_labels_on_one_instruction_both_resolve():
    insns = sass.parse_text(FAST_PATH)["_Z3barv"]
    assert insns[1][4] == (".L_x_1", ".L_x_9")
    (a, b), = sass.loops(insns)  # the back branch names the second of the two labels
    assert (insns[a][0], insns[b][0]) == (0x10, 0x90)
    assert b - a + 1 == 9


def test_dump_lists_a_loops_instructions(capsys, monkeypatch):
    import re
    monkeypatch.setattr(sass, "summarise", lambda path, pattern, m, n:
                        sass.summarise_kernels(sass.parse_text(FAST_PATH), pattern, m, n))
    assert sass.report("x.o", re.compile(""), 1, 1, dump=True) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("  loop 0x0010-0x0090: 9 instructions")
    assert out[3].split()[:3] == ["0x00010", ".L_x_1", ".L_x_9"]
    assert len(out) == 3 + 9
