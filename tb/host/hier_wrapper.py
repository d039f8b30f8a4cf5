"""Rewrite the wrappers of Verilator 5.048's hierarchical blocks: one evaluation per edge.

Verilator's own SystemVerilog wrapper of a hierarchical block (``--hierarchical``) evaluates
the block's model on both clock edges and on every input change: 6 full evaluations per
cycle in the FDPU arrays.  This module replaces it, between Verilator's run and make's, where
the block's generated C++ shows that it is exact.

Contract
--------
* :func:`edge_wrap_hier_blocks` (recipe 4): verilate every block of a ``--hierarchical``
  build, check each (:func:`edge_block_check`: outputs a function of the state, state changed
  on ``posedge clk`` only) and give the accepted ones the *edge* wrapper
  (:func:`write_edge_wrapper`): one evaluation per rising edge, outputs assigned
  non-blockingly, so cycle- and bit-identical to Verilator's wrapper.
* With ``skip`` (recipe 5): blocks that :func:`skip_block_check` also accepts (their
  evaluation a pure function of their root struct) get the *skip* wrapper, which does not
  evaluate a block sitting at a fixed point of its state with unchanged inputs.
* :func:`edge_wrap_verify`: after make, raise unless the top calls every rewritten wrapper.
* :func:`hier_edge_enabled` / :func:`hier_skip_enabled`: the switches ``FDPU_HIER_EDGE`` and
  ``FDPU_HIER_SKIP`` (on unless ``0``).

Anything the checks do not recognise keeps Verilator's wrapper; the reason is recorded in
``hier_edge.json`` of the build.  Works on files only; :mod:`tb.host.runner` calls it from
the cocotb build.  See ``docs/harness.md`` "Simulation speed".
"""

import json
import os
import re
import subprocess
from pathlib import Path

from tb.host.verilator import BUILD_JOBS

__all__ = ["HIER_EDGE_ENV", "HIER_SKIP_ENV", "HIER_SKIP_BACKOFF", "hier_edge_enabled",
           "hier_skip_enabled", "edge_block_check", "skip_block_check", "write_edge_wrapper",
           "edge_wrap_hier_blocks", "edge_wrap_verify"]


#: Environment variable that turns the rising-edge wrapper of hierarchical blocks off
#: (``FDPU_HIER_EDGE=0``: Verilator's own wrappers, for comparison).
HIER_EDGE_ENV = "FDPU_HIER_EDGE"

#: The only trigger a block may have for :func:`edge_wrap_hier_blocks`: ``posedge clk``.
_CLK_TRIGGER = "__Vtrigprevexpr___TOP__clk__0"

#: Helpers of the ``act`` region that Verilator 5.048 writes for a block with clocked logic only.
_ACT_HELPERS = {"dump_triggers__act", "eval_phase__act", "eval_triggers_vec__act",
                "trigger_anySet__act", "trigger_clear__act", "trigger_orInto__act_vec_vec"}


def hier_edge_enabled():
    """Return whether Verilator builds give hierarchical blocks the rising-edge wrapper.

    On unless ``FDPU_HIER_EDGE`` is ``0``/``false``/``no``/``off``.
    """
    value = os.environ.get(HIER_EDGE_ENV, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


#: Environment variable that turns the skipping of quiescent hierarchical blocks off
#: (``FDPU_HIER_SKIP=0``: every tick evaluates the block, for comparison).
HIER_SKIP_ENV = "FDPU_HIER_SKIP"

#: Ticks without a snapshot after a snapshot that showed a state change (run time:
#: ``FDPU_HIER_SKIP_BACKOFF`` in the simulator's environment overrides it).
HIER_SKIP_BACKOFF = 16

#: Member types of a block's root struct that are plain bits (``memcpy``/``memcmp`` exact).
_POD_TYPES = r"(?:CData|SData|IData|QData|EData|VlWide<\d+>)"

#: Generated code that reads or writes anything outside the root struct or has side effects:
#: a block using any of it is not skipped (its evaluation would not be a function of its root).
#: ``Verilated::overWidthError`` (debug builds: an input wider than its port) only stops.
_IMPURE = re.compile(r"\b(VL_RAND\w*|VL_RANDOM\w*|VL_WRITE\w*|VL_PRINTF\w*|VL_FINISH\w*|"
                     r"VL_STOP\w*|VL_TIME\w*|VL_FOPEN\w*|VL_FCLOSE\w*|VL_FWRITE\w*|"
                     r"VL_FFLUSH\w*|VL_READMEM\w*|VL_WRITEMEM\w*|VL_SFORMAT\w*|"
                     r"VL_VALUEPLUSARGS\w*|VL_TESTPLUSARGS\w*|VL_SYSTEM\w*|"
                     r"Verilated::(?!overWidthError\b)\w+|"
                     r"__Vdpiimwrap\w*|static\s)")


def hier_skip_enabled():
    """Return whether rising-edge wrappers skip the evaluation of quiescent blocks.

    On unless ``FDPU_HIER_SKIP`` is ``0``/``false``/``no``/``off``; only with the rising-edge
    wrapper (:func:`hier_edge_enabled`).
    """
    value = os.environ.get(HIER_SKIP_ENV, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def _c_functions(text):
    """Return ``{name: body}`` of the function definitions in generated C++ ``text``."""
    found = re.finditer(r"^[A-Za-z][^\n;{]*?\b(\w+)\(([^;{]*?)\)\s*\{\n(.*?)^\}", text,
                        re.MULTILINE | re.DOTALL)
    return {m.group(1): m.group(3) for m in found}


def _glue_function(cpp, function):
    """Return ``(arguments, body)`` of ``function`` in a block's protectlib glue C++."""
    m = re.search(rf"^    \w[\w ]*\*? {function}\((.*?)\)\s*\{{\n(.*?)\n    \}}\n", cpp,
                  re.MULTILINE | re.DOTALL)
    if m is None:
        raise ValueError(f"no function {function} in the protectlib glue")
    return m.group(1), m.group(2)


def _dpi_ports(sv, function):
    """Return ``[(direction, name)]`` of the arguments of the DPI import ``function``."""
    m = re.search(rf'import "DPI-C" function \w+ {function}\((.*?)\);', sv, re.DOTALL)
    if m is None:
        raise ValueError(f"no DPI import {function} in the hierarchical wrapper")
    return re.findall(r"\b(input|output) logic (?:\[[^\]]*\]\s*)?(\w+)", m.group(1))


def edge_block_check(block_dir, name):
    """Return why block ``name`` cannot be evaluated once per rising edge, or ``None``.

    The rising-edge wrapper (:func:`edge_wrap_hier_blocks`) is correct for a block whose
    outputs are functions of its state only and whose state changes only on ``posedge clk``.
    Both are read off the C++ that Verilator generated for the block (``block_dir``):

    * one ``act`` trigger, ``posedge clk`` (``clk & ~prev``), and no ``act`` region logic:
      nothing is clocked by another signal, edge or a derived clock;
    * no output port assigned in the input-combinational region (``ico``): the region holds
      everything that depends on the inputs combinationally, so an output written there could
      change without a clock edge.

    Anything this check does not recognise counts as a reason (the block keeps Verilator's
    own wrapper).
    """
    block_dir = Path(block_dir)
    prefix = block_dir.name
    sv = (block_dir / f"{name}.sv").read_text()
    clocks = [p for d, p in _dpi_ports(sv, f"{name}_protectlib_seq_update") if d == "input"]
    if clocks != ["clk"]:
        return f"clock inputs {clocks}, expected ['clk']"
    outputs = [p for d, p in _dpi_ports(sv, f"{name}_protectlib_seq_update") if d == "output"]
    _, seq = _glue_function((block_dir / f"{name}.cpp").read_text(),
                            f"{name}_protectlib_seq_update")
    members = re.findall(r"handlep__V->(\w+)", seq)
    out_members = [m for m in members if m not in ("clk", "eval", "m_seqnum")]
    if "handlep__V->clk = (clk);" not in seq or len(out_members) != len(outputs):
        return "unexpected protectlib seq_update"
    header = (block_dir / f"{prefix}___024root.h").read_text()
    if re.findall(r"\b(__Vtrigprevexpr\w*)", header) != [_CLK_TRIGGER]:
        return "clock triggers other than posedge clk"
    functions = {}
    for path in sorted(block_dir.glob(f"{prefix}___024root__*.cpp")):
        functions.update(_c_functions(path.read_text()))
    local = {fn.split("___024root___", 1)[1]: body for fn, body in functions.items()
             if "___024root___" in fn}
    act = {fn for fn in local if re.search(r"(^|_)act(_|$)", fn)}
    if act - _ACT_HELPERS:
        return f"act region logic {sorted(act - _ACT_HELPERS)}"
    trigger = re.sub(r"\s+", "", local.get("eval_triggers_vec__act", ""))
    expected = (f"vlSelfRef.__VactTriggered[0U]=(QData)((IData)(((IData)(vlSelfRef.clk)"
                f"&(~(IData)(vlSelfRef.{_CLK_TRIGGER})))));vlSelfRef.{_CLK_TRIGGER}"
                f"=vlSelfRef.clk;")
    if not trigger.endswith(expected) or trigger.count("__VactTriggered[") != 1:
        return "act trigger is not posedge clk alone"
    ico = [body for fn, body in local.items() if "ico_sequent" in fn]   # may be none
    for body in ico:
        # Statements and conditions: an output may be read (a condition, a right-hand side),
        # never written (a left-hand side, or any other statement naming it, e.g. a macro).
        for fragment in re.split(r"[;{}]", body):
            fragment = fragment.strip()
            if re.match(r"(if|else|while|for|switch|return)\b", fragment):
                continue
            for member in out_members:
                if not re.search(rf"\b{member}\b", fragment):
                    continue
                parts = re.split(r"(?<![=!<>])=(?!=)", fragment, maxsplit=1)
                if len(parts) == 1 or re.search(rf"\b{member}\b", parts[0]):
                    return f"output {member} is computed from the inputs (ico region)"
    return None


def skip_block_check(block_dir, name):
    """Return why the tick of block ``name`` may not skip evaluations, or ``None``.

    The skip (:func:`write_edge_wrapper` with ``skip=True``) compares the block's root struct
    (``<prefix>___024root``) before and after an evaluation, and replays nothing: it is exact
    when one evaluation is a deterministic function of the bytes of that struct and nothing
    but the tick writes it.  Read off the C++ Verilator generated for the block:

    * every member of the root struct is plain bits (``CData`` ... ``QData``, ``VlWide``,
      ``VlUnpacked`` arrays of those) or one of the two constant pointers (``vlSymsp``,
      ``vlNamep``): ``memcpy``/``memcmp`` see the whole state;
    * the evaluation code uses ``vlSymsp`` only for the debug flag, and nothing with state or
      effects outside the struct (random numbers, time, file or console output, ``$finish``,
      DPI imports, ``static`` variables: :data:`_IMPURE`);
    * no signal of the block is public (no ``varInsert`` in its symbol table): VPI, hence a
      backdoor, cannot write into it;
    * the model is not traced (``traceCapable = false``): a trace dump reads and clears
      activity flags in the struct.

    Anything it does not recognise counts as a reason (the tick then evaluates every edge).
    """
    block_dir = Path(block_dir)
    prefix = block_dir.name
    header = (block_dir / f"{prefix}___024root.h").read_text()
    m = re.search(r"^class\b[^\n]*___024root final \{\n(.*?)^\};", header,
                  re.MULTILINE | re.DOTALL)
    if m is None:
        return "unexpected root struct header"
    members = m.group(1)
    members = re.sub(r"/\*.*?\*/", "", members)
    members = re.sub(r"^\s*//.*$", "", members, flags=re.MULTILINE)
    for line in members.splitlines():
        line = line.strip()
        if not line or line in ("public:", "struct {", "};"):
            continue
        if (re.fullmatch(r"VL_(IN|OUT)(8|16|64|W)?\(\w+(,\d+){2,3}\);", line)
                or re.fullmatch(rf"{_POD_TYPES} \w+;", line)
                or re.fullmatch(rf"(VlUnpacked<)+{_POD_TYPES}(, \d+>)+ \w+;", line)
                or line in (f"{prefix}__Syms* vlSymsp;", "const char* vlNamep;")
                or line.startswith((f"{prefix}___024root(", f"~{prefix}___024root(",
                                    "VL_UNCOPYABLE(", "void __Vconfigure("))):
            continue
        return f"root struct member not plain bits: {line!r}"
    model = (block_dir / f"{prefix}.h").read_text()
    if "static constexpr bool traceCapable = false;" not in model:
        return "traced model (waves)"
    syms = "".join(p.read_text() for p in sorted(block_dir.glob(f"{prefix}__Syms*.cpp")))
    if "varInsert" in syms:
        return "public signals (VPI could write the model)"
    for path in sorted(block_dir.glob(f"{prefix}___024root__*.cpp")):
        if path.name.endswith("__Slow.cpp"):
            continue
        code = path.read_text()
        uses = len(re.findall(r"vlSymsp->", code))
        debug = code.count("vlSymsp->_vm_contextp__->debug()")
        if uses != debug:
            return f"evaluation reads the symbol table ({path.name})"
        impure = _IMPURE.search(code)
        if impure:
            return f"evaluation uses {impure.group(1).strip()} ({path.name})"
    return None


def write_edge_wrapper(block_dir, name, skip=False):
    """Replace the DPI wrapper of block ``name`` by one evaluating it once per rising edge.

    Verilator's wrapper (``<name>.sv`` in ``block_dir``) calls the block's model on *both*
    clock edges (``always @(clk)``, ``seq_update``) and again whenever an input changes
    (``always_comb``, ``combo_update``): 6 full evaluations per cycle in the FDPU arrays.
    The new wrapper, valid for the blocks :func:`edge_block_check` accepts:

    * ``always @(posedge clk)``: one call ``<name>_fdpu_tick`` that copies the inputs as they
      are at the edge into the model, raises its clock and evaluates it once (one
      input-combinational pass, one clocked pass); the outputs it returns are assigned with
      non-blocking assignments, so every block and the top read the *pre-edge* outputs of
      every other block at that edge, as registered outputs are read in the flat design;
    * at time 0 the outputs are read once from the model (their initial values);
    * the inputs are not copied between edges: the outputs do not depend on them, and the
      next edge copies them again before anything is computed from them.

    The tick (appended to the generated ``<name>.cpp``) is ``combo_update`` with the
    evaluation preceded by ``clk = 1`` and the model's previous-clock trigger value set to 0:
    the model sees a rising edge without a falling-edge evaluation (which would rerun its
    input-combinational region for nothing).  That member is Verilator 5.048's, checked by
    :func:`edge_block_check`.

    With ``skip`` (for blocks :func:`skip_block_check` accepts) the tick also skips the
    evaluation while the block is quiescent, exactly (cycle- and bit-identical):

    * each tick compares its inputs, as written into the model, with the previous tick's;
    * when they are equal and no back-off is pending, it copies the model's root struct
      (clock already 1) before the evaluation and compares it after: equal, the evaluation
      was a fixed point (*quiet*); different, no snapshot for ``FDPU_HIER_SKIP_BACKOFF``
      ticks (default :data:`HIER_SKIP_BACKOFF`);
    * while quiet, a tick whose inputs equal the previous tick's does not evaluate: the model
      holds exactly the struct the last evaluation started from and ended in (same state,
      same inputs, clock 1, previous-clock trigger 1), and an evaluation is a function of that
      struct, so it would leave it as it is; the outputs are read from the model as usual.
      Any input change ends it (that tick evaluates);
    * the tick returns ``quiet`` (bit 0), and the wrapper keeps it with the inputs of the last
      edge: while quiet and the inputs are unchanged it does not call the tick at all (the
      same decision, without the DPI call and the conversion of the ports); its count of
      such edges goes to ``<name>_fdpu_skip_final``.

    ``FDPU_HIER_SKIP_STATS=1`` in the simulator's environment prints, per block, ticks,
    evaluations, snapshots and the fixed points found, when the last instance ends.
    """
    block_dir = Path(block_dir)
    prefix = block_dir.name
    sv_path, cpp_path = block_dir / f"{name}.sv", block_dir / f"{name}.cpp"
    sv, cpp = sv_path.read_text(), cpp_path.read_text()
    combo = f"{name}_protectlib_combo_update"
    tick = f"{name}_fdpu_tick"
    ports = _dpi_ports(sv, combo)
    outputs = [p for d, p in ports if d == "output"]
    decl = re.search(rf'    import "DPI-C" function longint {combo}\(.*?\);\n', sv, re.DOTALL)
    head = sv[:sv.index("    initial begin")]
    tail = sv[sv.index("endmodule"):]
    args = ",\n            ".join(["handle__V"] + [f"{p}_tmp__V" if d == "output" else p
                                                   for d, p in ports])
    seq_args = ",\n            ".join(["handle__V", "1'b0"] + [f"{p}_tmp__V" for p in outputs])
    tick_decl = decl.group(0).replace(combo, tick).rstrip("\n")
    call = [f"        last_seq_seqnum__V <= {tick}(",
            f"            {args});",
            *[f"        {p} <= {p}_tmp__V;" for p in outputs]]
    state = []
    if skip:
        tick_decl = tick_decl.replace("chandle handle__V", "chandle handle__V, chandle skip__V", 1)
        args = args.replace("handle__V", "handle__V, skip__V", 1)
        # The wrapper keeps the last inputs and the tick's "quiet" bit: a skipped tick is
        # then not even called (no DPI marshalling of the ports).
        declared = dict((n, w or "") for _, w, n in re.findall(
            r"\b(input|output) logic (\[[^\]]*\])?\s*(\w+)", head[:head.index(");")]))
        inputs = [p for d, p in ports if d == "input"]
        if not inputs or any(p not in declared for p in inputs):
            raise ValueError(f"unexpected ports of the hierarchical wrapper {sv_path}")
        state = ["    logic quiet__V = 1'b0;   // the tick's last answer: a fixed point",
                 "    longint skipped__V = 0;",
                 *[f"    logic {declared[p]} {p}_last__V;".replace("logic  ", "logic ")
                   for p in inputs]]
        same = " && ".join(f"{p} == {p}_last__V" for p in inputs)
        nl = "\n" + " " * 12                      # the tick's arguments, one level deeper
        call = [f"        if (quiet__V && {same})",
                "            skipped__V <= skipped__V + 1;",
                "        else begin",
                f"            last_seq_seqnum__V = {tick}(",
                f"                {args.replace(nl, nl + '    ')});",
                "            quiet__V <= last_seq_seqnum__V[0];",
                *[f"            {p} <= {p}_tmp__V;" for p in outputs],
                "        end",
                *[f"        {p}_last__V <= {p};" for p in inputs]]
    body = [
        "    // tb.host.hier_wrapper.write_edge_wrapper: one evaluation per rising edge (the",
        "    // outputs depend on the block's state only, edge_block_check)"
        + (", skipped while the block\n    // is at a fixed point with unchanged inputs "
           "(skip_block_check)." if skip else "."),
        tick_decl,
        *([f'    import "DPI-C" function chandle {name}_fdpu_skip_new(chandle handle__V);',
           f'    import "DPI-C" function void {name}_fdpu_skip_final(chandle skip__V, '
           "longint skipped__V);",
           "    chandle skip__V;", *state] if skip else []),
        "",
        "    initial begin",
        f"        {name}_protectlib_check_hash(protectlib_hash__V);",
        f'        handle__V = {name}_protectlib_create($sformatf("%m"));',
        *([f"        skip__V = {name}_fdpu_skip_new(handle__V);"] if skip else []),
        f"        last_combo_seqnum__V = {name}_protectlib_seq_update(",
        f"            {seq_args});",
        *[f"        {p} = {p}_tmp__V;" for p in outputs],
        "    end",
        "",
        "    always @(posedge clk) begin",
        *call,
        "    end",
        "",
        *([f"    final {name}_fdpu_skip_final(skip__V, skipped__V);"] if skip else []),
        f"    final {name}_protectlib_final(handle__V);",
        "",
    ]
    sv_path.write_text(head + "\n".join(body) + "\n" + tail)

    arguments, combo_body = _glue_function(cpp, combo)
    if combo_body.count("handlep__V->eval();") != 1:
        raise ValueError(f"unexpected protectlib combo_update in {cpp_path}")
    cpp = cpp.replace('#include "verilated_dpi.h"\n',
                      f'#include "verilated_dpi.h"\n#include "{prefix}___024root.h"\n', 1)
    if not skip:
        tick_body = combo_body.replace(
            "handlep__V->eval();",
            "handlep__V->clk = 1;\n"
            f"        handlep__V->rootp->{_CLK_TRIGGER} = 0;   // a rising edge, one evaluation\n"
            "        handlep__V->eval();")
        cpp += ("\n// tb.host.hier_wrapper.write_edge_wrapper: set the inputs, one rising-edge "
                "evaluation, read the outputs.\n"
                f'extern "C" {{\n    long long {tick}({arguments}) {{\n{tick_body}\n    }}\n}}\n')
    else:
        cpp += _skip_glue(name, prefix, arguments, combo_body, cpp_path)
    cpp_path.write_text(cpp)


def _skip_glue(name, prefix, arguments, combo_body, cpp_path):
    """Return the C++ of the skipping tick of block ``name`` (:func:`write_edge_wrapper`)."""
    if f"class {prefix}_container" not in cpp_path.read_text():
        raise ValueError(f"no model container class in {cpp_path}")
    set_inputs, get_outputs = combo_body.split("handlep__V->eval();")
    inputs = list(dict.fromkeys(re.findall(r"handlep__V->(\w+)", set_inputs)))
    if not inputs or "clk" in inputs:
        raise ValueError(f"unexpected inputs {inputs} in the protectlib combo_update of {cpp_path}")
    root, state, stats = f"{prefix}___024root", f"{name}_fdpu_skip_t", f"{name}_fdpu_skip_stats"
    container = f"{prefix}_container"
    members = "".join(f"    std::remove_reference<decltype(static_cast<{container}*>"
                      f"(nullptr)->{m})>::type in_{m};\n" for m in inputs)
    compare = "".join(f"        FDPU_SKIP_INPUT({m});\n" for m in inputs)
    tick_arguments = arguments.replace("void* vhandlep__V", "void* vhandlep__V, void* vskip__V", 1)
    # The wrapper reads bit 0 of the answer: whether the block is now at a fixed point.
    returned = get_outputs.rstrip().replace(
        "return handlep__V->m_seqnum++;",
        "++handlep__V->m_seqnum;\n        return skip__V->quiet ? 1 : 0;")
    if returned == get_outputs.rstrip():
        raise ValueError(f"unexpected protectlib combo_update end in {cpp_path}")
    if tick_arguments == arguments:
        raise ValueError(f"no model handle argument in the protectlib combo_update of {cpp_path}")
    return f"""
// tb.host.hier_wrapper.write_edge_wrapper (skip): set the inputs, one rising-edge evaluation
// unless the block is quiescent (a fixed point of its root struct, same inputs), read the outputs.
#include <cstring>
#include <type_traits>

namespace {{
// Per instance: the inputs of the last tick, the snapshot of the root struct, the state.
struct {state} {{
    bool primed = false;      // in_* hold the previous tick's inputs
    bool quiet = false;       // the last evaluation was a fixed point, inputs unchanged since
    unsigned wait = 0;        // ticks before the next snapshot may be taken
    unsigned backoff = {HIER_SKIP_BACKOFF};
    unsigned char* snap = nullptr;
{members}}};
// Per block type: what the ticks did (FDPU_HIER_SKIP_STATS=1 prints it).
struct {name}_fdpu_skip_count_t {{
    unsigned long long ticks = 0, evals = 0, snaps = 0, quiet = 0;
    long live = 0;
}} {stats};
}}

#define FDPU_SKIP_INPUT(m) \\
    if (std::memcmp(static_cast<const void*>(&skip__V->in_##m), \\
                    static_cast<const void*>(&handlep__V->m), sizeof(skip__V->in_##m))) {{ \\
        same__V = false; \\
        std::memcpy(static_cast<void*>(&skip__V->in_##m), \\
                    static_cast<const void*>(&handlep__V->m), sizeof(skip__V->in_##m)); \\
    }}

extern "C" {{
    void* {name}_fdpu_skip_new(void* vhandlep__V) {{
        (void)vhandlep__V;
        {state}* const skip__V = new {state};
        skip__V->snap = new unsigned char[sizeof({root})];
        if (const char* env = std::getenv("FDPU_HIER_SKIP_BACKOFF")) {{
            skip__V->backoff = static_cast<unsigned>(std::strtoul(env, nullptr, 10));
        }}
        ++{stats}.live;
        return skip__V;
    }}

    void {name}_fdpu_skip_final(void* vskip__V, long long skipped__V) {{
        {state}* const skip__V = static_cast<{state}*>(vskip__V);
        {stats}.ticks += static_cast<unsigned long long>(skipped__V);
        delete[] skip__V->snap;
        delete skip__V;
        const char* env = std::getenv("FDPU_HIER_SKIP_STATS");
        if (--{stats}.live == 0 && env && env[0] && env[0] != '0') {{
            const {name}_fdpu_skip_count_t& c = {stats};
            std::fprintf(stderr, "fdpu hier skip: {name}: %llu ticks, %llu evaluated "
                         "(%.1f %%), %llu snapshots, %llu fixed points, root %zu bytes\\n",
                         c.ticks, c.evals, c.ticks ? 100.0 * c.evals / c.ticks : 0.0, c.snaps,
                         c.quiet, sizeof({root}));
        }}
    }}

    long long {name}_fdpu_tick({tick_arguments}) {{
{set_inputs.rstrip()}
        {state}* const skip__V = static_cast<{state}*>(vskip__V);
        {root}* const rootp__V = handlep__V->rootp;
        bool same__V = skip__V->primed;
{compare}        skip__V->primed = true;
        ++{stats}.ticks;
        if (!(same__V && skip__V->quiet)) {{
            skip__V->quiet = false;
            handlep__V->clk = 1;
            const bool snap__V = same__V && skip__V->wait == 0;
            if (skip__V->wait) --skip__V->wait;
            if (snap__V) std::memcpy(skip__V->snap, static_cast<const void*>(rootp__V),
                                     sizeof({root}));
            rootp__V->{_CLK_TRIGGER} = 0;   // a rising edge, one evaluation
            handlep__V->eval();
            ++{stats}.evals;
            if (snap__V) {{
                ++{stats}.snaps;
                skip__V->quiet = !std::memcmp(skip__V->snap, static_cast<const void*>(rootp__V),
                                              sizeof({root}));
                if (skip__V->quiet) ++{stats}.quiet;
                else skip__V->wait = skip__V->backoff;
            }}
        }}
{returned}
    }}
}}
#undef FDPU_SKIP_INPUT
"""


def edge_wrap_hier_blocks(build_dir, prefix, log=None, skip=False):
    """Verilate the hierarchical blocks of a build and give each the rising-edge wrapper.

    Call between Verilator's first run (``--hierarchical`` without ``--build``: it writes
    ``<prefix>_hier.mk``) and ``make -f <prefix>.mk``: this verilates every block (the
    ``<block>.sv`` targets of ``<prefix>_hier.mk``), then rewrites the wrapper and glue of
    each block that :func:`edge_block_check` accepts (:func:`write_edge_wrapper`).  The top
    is verilated afterwards by the make run, against the new wrappers.

    Parameters
    ----------
    build_dir : path-like
        Verilator's ``-Mdir``.
    prefix : str
        Verilator's ``--prefix`` (``Vtop`` for cocotb builds).
    log : file, optional
        Where make's output and one line per block go.
    skip : bool
        Give the ticks of the blocks that :func:`skip_block_check` also accepts the skipping of
        quiescent evaluations (:func:`write_edge_wrapper`).

    Returns
    -------
    dict
        ``{block: "edge"}``, ``{block: "edge+skip"}``, ``{block: "edge (no skip: reason)"}``
        or ``{block: reason it keeps Verilator's wrapper}``; also written to
        ``hier_edge.json`` in ``build_dir``.
    """
    build_dir = Path(build_dir)
    hier_mk = build_dir / f"{prefix}_hier.mk"
    libs = re.findall(r"^\s+(\S+)/lib(\S+)\.a \\$", hier_mk.read_text(), re.MULTILINE)
    if log is not None:
        log.flush()
    subprocess.run(["make", "-j", str(BUILD_JOBS), "-f", hier_mk.name,
                    *(f"{folder}/{name}.sv" for folder, name in libs)],
                   cwd=build_dir, stdout=log, stderr=subprocess.STDOUT if log else None,
                   check=True)
    done = {}
    for folder, name in libs:
        reason = edge_block_check(build_dir / folder, name)
        if reason is None:
            no_skip = skip_block_check(build_dir / folder, name) if skip else "off"
            write_edge_wrapper(build_dir / folder, name, skip=no_skip is None)
            done[name] = ("edge+skip" if no_skip is None else
                          "edge" if not skip else f"edge (no skip: {no_skip})")
        else:
            done[name] = reason
        if log is not None:
            print(f"edge_wrap_hier_blocks: {name}: "
                  f"{done[name] if reason is None else reason}", file=log, flush=True)
    # Verilator's --skip-identical keeps the top's C++ when its inputs' recorded times are
    # unchanged; it records seconds, so a wrapper rewritten within the second its first
    # version was written in (small designs) would go unnoticed and the top would keep
    # calling Verilator's wrapper.  Its records are a cache ("Delete at will"): delete them.
    if any(value.startswith("edge") for value in done.values()):
        for stale in (build_dir / f"{prefix}__verFiles.dat",
                      build_dir / f"{prefix}__hier.dir" / f"{prefix}__verFiles.dat"):
            stale.unlink(missing_ok=True)
    (build_dir / "hier_edge.json").write_text(json.dumps(done, indent=1) + "\n")
    return done


def edge_wrap_verify(build_dir, prefix):
    """Raise ``ValueError`` unless the top's C++ calls each block's wrapper as recorded.

    Call after the top is verilated (after ``make -f <prefix>.mk``): every block that
    ``hier_edge.json`` marks ``edge`` must be called through ``<block>_fdpu_tick``, and through
    ``<block>_fdpu_skip_new`` too where it says ``edge+skip``; no-op without the file.
    """
    build_dir = Path(build_dir)
    record = build_dir / "hier_edge.json"
    if not record.is_file():
        return
    done = json.loads(record.read_text())
    code = "".join(path.read_text() for path in sorted(build_dir.glob(f"{prefix}*.cpp")))
    for name, value in done.items():
        needed = ([f"{name}_fdpu_tick"] if value.startswith("edge") else []) + \
                 ([f"{name}_fdpu_skip_new"] if value == "edge+skip" else [])
        missing = [function for function in needed if function not in code]
        if missing:
            raise ValueError(f"the top's C++ in {build_dir} does not call {missing} "
                             f"(hier_edge.json: {name}: {value}): the top was not verilated "
                             f"against the new wrapper")


