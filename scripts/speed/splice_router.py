"""Write a captured job's Verilog with its router module replaced by the current hw/noc/router.py.

A job (``make_job.py``) holds the whole system top; re-capturing it after a router change would
also pick up every other change made meanwhile (the PE, the DMA...).  This script keeps the
job's Verilog and swaps only the shared router module (``// hw.lib.shared module: router_*``) for
the router the working tree generates now, under the job's module name, so that two variants
differ in the router alone.

Usage::

    .venv/bin/python scripts/speed/splice_router.py build/speed/head2 fdpu_system_router.v
    .venv/bin/python scripts/speed/build.py build/speed/head2 rmem --reg-in --hier 1 \\
        --source fdpu_system_router.v --rate
"""

import argparse
import json
import re
import sys
from pathlib import Path

from hw.lib.shared import MARKER
from hw.noc.mesh import Mesh
from hw.tooling.verilog import to_verilog
from sw.spec.arch import ArrayParams


def shared_text(verilog, prefix):
    """Return ``(name, start, end)`` of the shared module whose name starts with ``prefix``.

    The text runs from its marker line to the ``endmodule`` of its last submodule (modules
    named ``NAME`` or ``\\NAME.*``); what follows (e.g. the SRAM module) is not part of it.
    """
    match = re.search(rf"^{re.escape(MARKER)}({prefix}\w*)\n", verilog, re.MULTILINE)
    if match is None:
        raise SystemExit(f"no shared module {prefix}* in the Verilog")
    name, end = match.group(1), match.end()
    for module in re.finditer(r"^module \\?([^\s(]+)", verilog[match.end():], re.MULTILINE):
        if module.group(1) != name and not module.group(1).startswith(name + "."):
            break
        end = verilog.index("endmodule\n", match.end() + module.start()) + len("endmodule\n")
    return name, match.start(), end


def main(argv=None):
    """Splice the current router into the job's Verilog."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job")
    ap.add_argument("out", help="file name inside the job folder")
    ap.add_argument("--depth", type=int, default=4, help="router input slots (top default 4)")
    args = ap.parse_args(argv)
    job = Path(args.job)
    spec = json.loads((job / "spec.json").read_text())
    verilog = (job / "fdpu_system.v").read_text()
    old_name, start, end = shared_text(verilog, "router_")
    params = ArrayParams(rows=spec["rows"], cols=spec["cols"], dbuf_bytes=1 << 21)
    mesh = to_verilog(Mesh(params, depth=args.depth), "mesh")
    new_name, s2, e2 = shared_text(mesh, "router_")
    text = mesh[s2:e2].replace(new_name, old_name)
    width = re.compile(r"input (\[\d+:0\]) i_flit__0__payload;")
    if width.search(text).group(1) != width.search(verilog[start:end]).group(1):
        raise SystemExit("flit width of the job and of the current router differ")
    (job / args.out).write_text(verilog[:start] + text + verilog[end:])
    print(f"{job / args.out}: {old_name} <- current hw/noc/router.py ({new_name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
