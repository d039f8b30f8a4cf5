"""RTL coverage (scripts/coverage.py, FDPU_COVERAGE in tb.host.runner): a Verilator run
writes its coverage, and the report counts each point once per module."""

from scriptutil import load_script
from tb.host.runner import run_cocotb


def _point(kind, module, line, comment, count, hier, file="top.v"):
    keys = dict(f=str(file), l=str(line), page=f"v_{kind}/{module}", o=comment, h=hier)
    return "C '" + "".join(f"\x01{k}\x02{v}" for k, v in keys.items()) + f"' {count}\n"


def test_points_count_once_per_module_hit_in_any_instance(tmp_path):
    cov = load_script("coverage")
    dat = tmp_path / "c.dat"
    dat.write_text("# SystemC::Coverage-3\n"
                   + _point("line", "fdpu_pe_ab.fpu", 10, "if", 0, "top.pe_0_0.fpu")
                   + _point("line", "fdpu_pe_ab.fpu", 10, "if", 3, "top.pe_0_1.fpu")
                   + _point("line", "fdpu_pe_ab.fpu", 12, "else", 0, "top.pe_0_0.fpu")
                   + _point("toggle", "router_cd", 5, "valid:0->1", 1, "top.r")
                   + _point("toggle", "\\fdpu_system.fdpu.dma", 7, "busy:1->0", 0, "top.d")
                   + _point("line", "fdpu_pe_ab.alu2", 3, "block", 1, "top.pe_0_0.alu2"))
    s = cov.summarize(dat)
    assert s["FPU"]["line"] == [1, 2]
    assert s["FPU"]["missed"] == [("line", "fdpu_pe_ab.fpu", "top.v", 12, "else")]
    assert s["FPU"]["modules"] == {"pe.fpu": {"line": [1, 2]}}
    assert s["router"]["toggle"] == [1, 1] and s["DMA"]["toggle"] == [0, 1]
    assert s["ALU"]["line"] == [1, 1]
    assert [cov.category(m) for m in ("fdpu_pe_ab.store.arbiter", "\\fdpu_system.fdpu.micc.out",
                                      "\\fdpu_system.fdpu.cbuf.bank0",
                                      "\\fdpu_system.fdpu.dbuf3.sram", "\\fdpu_system.fdpu.rep",
                                      "\\fdpu_system.extmem.delay", "fdpu_system")] == \
        ["PE", "MicC", "Cbuf", "Dbuf", "mesh wiring", "external memory (bench)", "top"]
    # The routers inside a flat mesh are the router; the mesh's own ports its wiring.
    assert [cov.category(m) for m in ("\\fdpu_system.fdpu.req.r_1_0", "noc_memory_x.noc.reply.r",
                                      "router_ab.in_local", "mesh", "noc_memory_x.noc")] == \
        ["router", "router", "router", "mesh wiring", "mesh wiring"]


def test_toggles_count_the_named_signals_and_list_them_by_signal(tmp_path):
    # The generator's anonymous nets ($N: Verilator's __024N) count in toggle_all only; the
    # missed bits of a signal are listed as ranges.
    cov = load_script("coverage")
    dma = "\\fdpu_system.fdpu.dma"
    dat = tmp_path / "c.dat"
    dat.write_text(_point("toggle", dma, 5, "__02410[3]:0->1", 0, "t")
                   + _point("toggle", dma, 5, "__02410[4]:0->1", 7, "t")
                   + "".join(_point("toggle", dma, 9, f"addr[{b}]:{d}", n, "t")
                             for b, n in ((0, 1), (1, 0), (2, 0), (3, 0), (5, 0))
                             for d in ("0->1", "1->0"))
                   + _point("toggle", dma, 11, "busy:1->0", 0, "t")
                   + _point("toggle", dma, 11, "busy:0->1", 2, "t"))
    s = cov.summarize(dat)["DMA"]
    assert s["toggle"] == [3, 12] and s["toggle_all"] == [4, 14]
    assert list(cov.missed_toggles(s["missed"])) == [
        (dma, "top.v", 9, "addr", "[3:1],[5]"),
        (dma, "top.v", 11, "busy", "")]
    assert cov.anonymous("__024auto__024verilog_backend:0->1") and not cov.anonymous("o:0->1")


def test_a_generators_number_after_a_name_matches_across_configurations(tmp_path):
    # Yosys's second net of a name (x$70; Verilator: x__02470) has another number in another
    # configuration: matched by the number's rank among that name's numbers.
    cov = load_script("coverage")
    dat = tmp_path / "c.dat"
    dat.write_text(_point("toggle", "router_aa", 5, "i__02470[0]:0->1", 1, "a")
                   + _point("toggle", "router_aa", 6, "i__02475[0]:0->1", 0, "a")
                   + _point("toggle", "router_bb", 5, "i__02491[0]:0->1", 0, "b")
                   + _point("toggle", "router_bb", 6, "i__02493[0]:0->1", 1, "b"))
    s = cov.summarize(dat)["router"]
    assert s["toggle"] == [2, 2]
    dat.write_text(_point("toggle", "router_aa", 5, "i__02470[0]:0->1", 1, "a")
                   + _point("toggle", "router_bb", 6, "i__02493[0]:0->1", 0, "b")
                   + _point("toggle", "router_bb", 5, "j__02491[0]:0->1", 0, "b"))
    assert cov.summarize(dat)["router"]["toggle"] == [1, 2]


def test_configurations_of_one_block_count_once(tmp_path):
    # Two PE configurations whose FPU has the same points: a point is hit when either hit
    # it; configurations with other points are matched by kind and text (no Verilog here:
    # the same empty text), the larger one's extra point counting on its own.
    cov = load_script("coverage")
    assert cov.role("fdpu_pe_0123ab.alu2") == "pe.alu2"
    assert cov.role("\\fdpu_system.fdpu.dbuf3.sram") == "dbuf.sram"
    assert cov.role("\\fdpu_system.fdpu.dma2") == "dma"
    # The DMA rig's blocks are the DMA, Cbuf and meshes; the rig's own logic is a bench's.
    assert [cov.role(m) for m in ("dma_rig.dma", "dma_rig.cbuf.bank0", "dma_rig.req.r")] == \
        ["dma", "cbuf.bank0", "req.r"]
    assert [cov.category(m) for m in ("dma_rig", "dma", "cbuf.bank0", "req.r")] == \
        ["bench rigs", "DMA", "Cbuf", "router"]
    dat = tmp_path / "c.dat"
    dat.write_text(_point("line", "fdpu_pe_aa.fpu", 10, "if", 1, "a")
                   + _point("line", "fdpu_pe_aa.fpu", 12, "else", 0, "a")
                   + _point("line", "fdpu_pe_bb.fpu", 20, "if", 0, "b")
                   + _point("line", "fdpu_pe_bb.fpu", 22, "else", 5, "b"))
    assert cov.summarize(dat)["FPU"]["line"] == [2, 2]
    dat.write_text(_point("line", "fdpu_pe_aa.fpu", 10, "if", 1, "a")
                   + _point("line", "fdpu_pe_bb.fpu", 20, "if", 0, "b")
                   + _point("line", "fdpu_pe_bb.fpu", 22, "else", 0, "b"))
    assert cov.summarize(dat)["FPU"]["line"] == [1, 2]
    # Toggles of named signals are matched by name across configurations of any size.
    dat.write_text(_point("toggle", "fdpu_pe_aa.fpu", 3, "o[0]:0->1", 1, "a")
                   + _point("toggle", "fdpu_pe_aa.fpu", 3, "o[1]:0->1", 0, "a")
                   + _point("toggle", "fdpu_pe_bb.fpu", 4, "o[1]:0->1", 2, "b")
                   + _point("toggle", "fdpu_pe_bb.fpu", 4, "o[2]:0->1", 0, "b")
                   + _point("toggle", "fdpu_pe_bb.fpu", 5, "__0241[0]:0->1", 0, "b"))
    s = cov.summarize(dat)["FPU"]
    assert s["toggle"] == [2, 3] and s["toggle_all"] == [1, 2]


def test_a_verilator_run_writes_its_coverage(tmp_path, monkeypatch):
    # FDPU_COVERAGE: a flat coverage build of its own, one .dat per run, line and toggle
    # points of the ALU's module among them, some hit.
    monkeypatch.setenv("FDPU_COVERAGE", str(tmp_path / "runs"))
    result = run_cocotb("alu", {"tag_width": 8}, "tb.alu.bench_alu", "verilator",
                        testcase="stream_traffic")
    assert result.tests == 1 and "-cov-" in result.build_dir.name
    files = list((tmp_path / "runs").glob("*.dat"))
    assert len(files) == 1
    cov = load_script("coverage")
    s = cov.summarize(files[0])
    hit, total = s["ALU"]["line"]
    assert total > 0 and 0 < hit <= total
    assert s["ALU"]["toggle"][1] > 0


def test_points_unreachable_by_design_leave_the_total_and_a_hit_one_is_reported(tmp_path):
    # EXCEPTIONS: the MADD arm (Verilog line "4'h3:") of a PE's ALU is left out when never
    # hit; matched by the role and the Verilog text, not by the line number; when hit, it
    # stays in the count and is reported as a wrong exception.
    cov = load_script("coverage")
    verilog = tmp_path / "v.v"
    verilog.write_text("      4'h2:\n      4'h3:\n      4'h3:\n")
    dat = tmp_path / "c.dat"
    dat.write_text(_point("line", "fdpu_pe_ab.alu", 1, "case", 5, "a", verilog)
                   + _point("line", "fdpu_pe_ab.alu", 2, "case", 0, "a", verilog)
                   + _point("line", "alu", 3, "case", 0, "b", verilog))
    s = cov.summarize(dat)["ALU"]
    assert s["line"] == [1, 2] and [e[2] for e in s["excepted"]] == [2] and s["wrong"] == []
    dat.write_text(_point("line", "fdpu_pe_ab.alu", 1, "case", 5, "a", verilog)
                   + _point("line", "fdpu_pe_ab.alu", 2, "case", 1, "a", verilog))
    s = cov.summarize(dat)["ALU"]
    assert s["line"] == [2, 2] and s["excepted"] == [] and len(s["wrong"]) == 1


def test_line_points_of_configurations_of_other_sizes_match_by_text(tmp_path):
    # Two configurations of one block with 2 and 3 case arms: the arms alike count once (hit
    # when either hit them), the larger one's extra arm on its own.
    cov = load_script("coverage")
    small, large = tmp_path / "s.v", tmp_path / "l.v"
    small.write_text("  4'h0:\n  4'h1:\n")
    large.write_text("  4'h0:\n  4'h1:\n  4'h2:\n")
    dat = tmp_path / "c.dat"
    dat.write_text(_point("line", "fdpu_pe_aa.fpu", 1, "case", 0, "a", small)
                   + _point("line", "fdpu_pe_aa.fpu", 2, "case", 4, "a", small)
                   + _point("line", "fdpu_pe_bb.fpu", 1, "case", 3, "b", large)
                   + _point("line", "fdpu_pe_bb.fpu", 2, "case", 0, "b", large)
                   + _point("line", "fdpu_pe_bb.fpu", 3, "case", 0, "b", large))
    assert cov.summarize(dat)["FPU"]["line"] == [2, 3]
