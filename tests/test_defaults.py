"""The default configuration is written once: ``ArrayParams()`` in ``System()``.

Every command (``fdpu run``, ``rtl``, ``asm``, ``net``), the named tops that ``fdpu verilog``
builds, the hardware factories, the planner and performance model, and the documentation that
states the configuration must agree with those two values.
"""

import inspect
import re
from pathlib import Path

import pytest

from hw.array import make_pe_array
from hw.pe.pe import make_pe
from hw.top import FDPU, build_fdpu
from sw.cli.app import build_parser
from sw.cli.options import DEFAULTS, array_params, system_of
from sw.compiler import planner
from sw.models import perf
from sw.spec.arch import ArrayParams
from sw.spec.system import System
from tb.host import tops
from tb.host.extmem import build_system

ROOT = Path(__file__).resolve().parents[1]
A, S = ArrayParams(), System()
PE_FIELDS = ("slots", "operand_depth", "int_issue", "regs")


def test_the_default_is_the_readme_configuration():
    # The paper's 8 x 8 array, 6 KB operand buffer per PE as 128 slots at depth 2, its two
    # integer units, 2 MiB Dbufs, 8 Cbufs of 64 KiB; 4 DMA channels and 4 configuration ports.
    assert (A.rows, A.cols, A.slots, A.operand_depth, A.int_issue) == (8, 8, 128, 2, 2)
    assert A.operand_buffer_bytes == 6 * 1024
    assert (A.dbuf_bytes, A.cbufs, A.cbuf_bytes) == (2 << 20, 8, 64 << 10)
    assert (S.dma_channels, S.config_ports) == (4, 4)


def test_cli_defaults_are_read_from_the_values():
    assert DEFAULTS == dict(rows=A.rows, cols=A.cols, slots=A.slots,
                            operand_depth=A.operand_depth, int_issue=A.int_issue,
                            dbuf_bytes=A.dbuf_bytes, dma_channels=S.dma_channels)


@pytest.mark.parametrize("argv", [
    ["run", "--layer", "alexnet-fc8"],
    ["rtl", "--layer", "alexnet-fc8"],
    ["asm", "--layer", "alexnet-fc8"],
    ["net", "model.onnx"],
])
def test_every_command_defaults_to_the_configuration(argv):
    args = build_parser().parse_args(argv)
    params = array_params(args)
    assert (params.rows, params.cols) == (A.rows, A.cols)
    for name in PE_FIELDS + ("dbuf_bytes",):
        if hasattr(args, name):
            assert getattr(params, name) == getattr(A, name), (argv[0], name)
    if hasattr(args, "dma_channels"):
        assert system_of(args, params) == S, argv[0]


def _defaults(func):
    return {name: p.default for name, p in inspect.signature(func).parameters.items()
            if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("name", ["fdpu", "pe"])
def test_the_named_tops_default_to_the_configuration(name):
    params = {p.name: p.default for p in tops.get_top(name).params}
    for field in ("rows", "cols", "dbuf_bytes") + PE_FIELDS:
        if field in params:
            assert params[field] == getattr(A, field), (name, field)
    if name == "fdpu":
        assert (params["cbufs"], params["cbuf_bytes"]) == (A.cbufs, A.cbuf_bytes)
        assert (params["dma_channels"], params["config_ports"]) == (S.dma_channels,
                                                                    S.config_ports)


def test_the_verilog_top_is_built_with_the_configuration():
    component, _ = tops.build("fdpu", {})
    assert component.params == A


@pytest.mark.parametrize("factory", [build_fdpu, make_pe, make_pe_array, build_system])
def test_factories_take_the_pe_from_the_configuration(factory):
    given = _defaults(factory)
    for field in PE_FIELDS:
        if field in given:
            assert given[field] == getattr(A, field), (factory.__name__, field)
    if factory is build_fdpu:
        assert {k: given[k] for k in ("rows", "cols", "dbuf_bytes", "cbufs", "cbuf_bytes")} == \
            dict(rows=A.rows, cols=A.cols, dbuf_bytes=A.dbuf_bytes, cbufs=A.cbufs,
                 cbuf_bytes=A.cbuf_bytes)
        assert (given["dma_channels"], given["config_ports"]) == (S.dma_channels,
                                                                  S.config_ports)


def test_components_default_to_the_configuration():
    given = _defaults(FDPU.__init__)
    assert given["params"] == A
    assert (given["dma_channels"], given["config_ports"]) == (S.dma_channels, S.config_ports)


def test_the_planner_and_model_default_to_the_configuration():
    plan = planner.plan_fc(16, 64, 4, "dense")
    assert plan.params == A
    assert _defaults(perf.predict)["system"] == S


def test_the_docs_state_the_configuration():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{A.rows} x {A.cols} array with {A.slots} instruction slots per PE at operand "
            f"depth {A.operand_depth}") in readme
    assert f"{S.dma_channels} DMA channels" in readme
    isa = (ROOT / "docs" / "isa.md").read_text()
    table = dict(re.findall(r"^\| `(\w+)` \| (\d+) \|", isa, re.M))
    for field in PE_FIELDS:
        assert int(table[field]) == getattr(A, field), field


def test_a_small_pe_is_named_explicitly():
    small = ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1)
    assert small.operand_buffer_bytes == A.operand_buffer_bytes       # the same 6 KB
    assert small.slot_bits == A.slot_bits - 1
