"""The registry of named hardware tops: what ``fdpu verilog``, ``fdpu lint`` and the cocotb
harness can build by name.

Each entry names a factory (``"module:Class"``, imported only when that top is built, so the
CLI starts fast and one broken block does not break the others), its parameters with types,
defaults and documentation. A new block registers itself by adding one :class:`Top` to
:data:`TOPS`::

    Top("router", "hw.noc.router:Router", "One mesh router.", (
        Param("width", int, 64, "flit width in bits", most=1024),
    )),

Parameter values given as text (``--param width=16``) are parsed by :func:`parse_params`;
every mistake raises :class:`sw.spec.errors.FdpuError` naming the top, the parameter and what is
allowed.
"""

import importlib
from dataclasses import dataclass

from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.system import System

#: The configuration the ``pe`` and ``fdpu`` tops default to (the README's, written once in
#: :class:`sw.spec.arch.ArrayParams` and :class:`sw.spec.system.System`).
_A, _S = ArrayParams(), System()

__all__ = ["Param", "Top", "TOPS", "get_top", "parse_params", "build"]


@dataclass(frozen=True)
class Param:
    """One parameter of a top.

    Attributes
    ----------
    name : str
        Keyword argument of the factory.
    type : type
        ``int``, ``bool`` or ``str``: how the text of ``--param name=value`` is parsed.
    default : object
        Value used when the parameter is not given.
    doc : str
        One line for ``--help`` and error messages.
    most : int, optional
        The largest value built (a size the generated Verilog grows with; checked before
        elaboration, so a value that would take gigabytes is one error, not a MemoryError).
    """
    name: str
    type: type
    default: object
    doc: str
    most: int = None

    def parse(self, text):
        """Return ``text`` converted to this parameter's type, or raise ``ValueError``."""
        if self.type is bool:
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected a boolean (true/false, 1/0)")
        if self.type is int:
            try:
                return int(text, 0)
            except ValueError:
                raise ValueError("expected an integer (decimal, or 0x.. / 0b.. prefixed)")
        return self.type(text)


@dataclass(frozen=True)
class Top:
    """A buildable hardware top.

    Attributes
    ----------
    name : str
        Registry name, also the Verilog module name of the generated top.
    factory : str
        ``"package.module:Callable"`` returning a ``wiring.Component`` from keyword arguments.
    doc : str
        One line describing the block.
    params : tuple of Param
        The factory's parameters, in the order ``--help`` shows them.
    """
    name: str
    factory: str
    doc: str
    params: tuple = ()

    @property
    def defaults(self):
        """Map each parameter name to its default value."""
        return {param.name: param.default for param in self.params}

    def describe_params(self):
        """Return ``"width (int, default 8): payload width in bits; ..."`` for messages."""
        if not self.params:
            return "none"
        return "; ".join(f"{p.name} ({p.type.__name__}, default {p.default!r}): {p.doc}"
                         for p in self.params)


#: Every top, by name. Add one entry per block.
TOPS = {top.name: top for top in (
    Top("fifo", "hw.lib.fifo:StreamFIFO", "Stream FIFO (amaranth.lib.fifo behind stream ports).", (
        Param("width", int, 8, "payload width in bits, >= 1", most=4096),
        Param("depth", int, 4, "capacity in words, >= 1", most=65536),
    )),
    Top("fpu", 
        "hw.pe.fpu:SimdFpu", "Pipelined SIMD-4 binary16 FMA unit (FMADD FMUL FADD FSUB MOV MAX).", (
        Param("tag_width", int, 8, "width of the pass-through result tag, >= 1", most=64),
    )),
    Top("pe", 
        "hw.pe.pe:make_pe", "Processing element: operand buffer, dataflow issue, INT+FP pipes.", (
        Param("rows", int, _A.rows, "array rows (1..16)"),
        Param("cols", int, _A.cols, "array columns (1..16)"),
        Param("slots", int, _A.slots, "instruction slots per PE (power of two)"),
        Param("operand_depth", int, _A.operand_depth, "tokens per operand FIFO (power of two)"),
        Param("regs", int, _A.regs, "local 64-bit registers (power of two)"),
        Param("dbuf_bytes", int, _A.dbuf_bytes, "bytes per Dbuf (power of two)"),
        Param("x", int, -1, "this PE's column as a constant; -1: the i_coord input port"),
        Param("y", int, -1, "this PE's row as a constant; -1: the i_coord input port"),
        Param("micc_x", int, -1, "MicC column (CTX_END destination)"),
        Param("micc_y", int, 0, "MicC row (CTX_END destination)"),
        Param("pool", int, 32, "load/store reorder pool entries (power of two)"),
        Param("int_issue", int, _A.int_issue, "INT/CTRL instructions issued per cycle (1 or 2)"),
        Param("banks", int, 4, "operand memories per operand index (2 or 4, by slot bits)"),
    )),
    Top("alu", "hw.pe.alu:IntAlu", "Pipelined 32-bit integer unit (add, mul, logic, compares).", (
        Param("tag_width", int, 8, "width of the pass-through result tag, >= 1", most=64),
    )),
    Top("router", "hw.noc.router:build_router", "5-port mesh router, XY routing (docs/noc.md).", (
        Param("rows", int, 4, "array rows, 1..16"),
        Param("cols", int, 4, "array columns, 1..16"),
        Param("width", int, 0, "flit width in bits (0: the sw.spec.packet flit width)",
              most=1024),
        Param("depth", int, 4, "flits per input FIFO, >= 2", most=1024),
    )),
    Top("mesh", "hw.noc.mesh:build_mesh", "R x C mesh of routers, one network (docs/noc.md).", (
        Param("rows", int, 4, "array rows, 1..16"),
        Param("cols", int, 4, "array columns, 1..16"),
        Param("width", int, 0, "flit width in bits (0: the sw.spec.packet flit width)",
              most=1024),
        Param("depth", int, 4, "flits per router input FIFO, >= 2", most=1024),
    )),
    Top("noc", "hw.noc.mesh:build_noc", "Request and reply meshes with per-PE steering.", (
        Param("rows", int, 2, "array rows, 1..16"),
        Param("cols", int, 2, "array columns, 1..16"),
        Param("depth", int, 4, "flits per router input FIFO, >= 2", most=1024),
    )),
    Top("dbuf", "hw.noc.dbuf:build_dbuf", "Dbuf scratch-pad serving LOAD/STORE flits.", (
        Param("rows", int, 2, "array rows (sizes the address map and coordinates)"),
        Param("cols", int, 2, "array columns"),
        Param("index", int, 0, "Dbuf number"),
        Param("dbuf_bytes", int, 4096, "bytes per Dbuf, a power of two"),
        Param("reply_depth", int, 4, "reply FIFO depth, >= 2", most=1024),
    )),
    Top("cbuf", 
        "hw.ctrl.cbuf:build_cbuf", "Cbufs: configuration flits for the MicC (docs/system.md).", (
        Param("rows", int, 2, "array rows (sizes the flit)"),
        Param("cols", int, 2, "array columns"),
        Param("cbufs", int, 2, "number of banks"),
        Param("cbuf_bytes", int, 1024, "bytes per bank, a power of two"),
        Param("behavioural", bool, False, "banks as behavioural SRAMs (simulation loading)"),
        Param("ports", int, 1, "read ports (1..4, dividing cbufs), each over its own banks"),
    )),
    Top("micc", 
        "hw.ctrl.micc:build_micc", "MicC: configuration, windowed contexts, end counting.", (
        Param("rows", int, 2, "array rows"),
        Param("cols", int, 2, "array columns"),
        Param("cbufs", int, 2, "number of Cbufs"),
        Param("cbuf_bytes", int, 1024, "bytes per Cbuf"),
        Param("operand_depth", int, _A.operand_depth, "largest context window"),
        Param("ports", int, 1, "configuration ports (1..4, dividing cbufs)"),
    )),
    Top("dma", "hw.ctrl.dma:build_dma", "DMA: descriptor lists between external memory and the "
        "Dbufs/Cbufs (docs/system.md).", (
        Param("rows", int, 1, "array rows (address map, coordinates)"),
        Param("cols", int, 1, "array columns"),
        Param("cbufs", int, 1, "number of Cbufs"),
        Param("cbuf_bytes", int, 1024, "bytes per Cbuf"),
        Param("dbuf_bytes", int, 4096, "bytes per Dbuf"),
        Param("outstanding", int, 64, "external reads / Dbuf loads in flight (power of two)",
              most=4096),
    )),
    Top("fdpu_system", "tb.host.extmem:build_system", "The FDPU top with the behavioural external "
        "memory on its DMA port (simulation; docs/system.md).", (
        Param("rows", int, 1, "PE rows"),
        Param("cols", int, 1, "PE columns"),
        Param("slots", int, _A.slots, "instruction slots per PE"),
        Param("operand_depth", int, _A.operand_depth, "tokens per operand FIFO"),
        Param("dbuf_bytes", int, 4096, "bytes per Dbuf"),
        Param("cbufs", int, 1, "Cbufs"),
        Param("cbuf_bytes", int, 4096, "bytes per Cbuf"),
        Param("ext_bytes", int, 65536, "external memory bytes (power of two)"),
        Param("int_issue", int, _A.int_issue, "INT/MEM/CTRL issues per PE and cycle (1 or 2)"),
        Param("depth", int, 4, "router input FIFO depth"),
        Param("dma_channels", int, 1, "DMA channels, each with an edge port and an external "
              "memory"),
        Param("config_ports", int, 1, "MicC configuration ports (1..4, dividing cbufs)"),
    )),
    Top("fdpu", "hw.top:build_fdpu", "The whole FDPU; the defaults are the configuration "
        "every figure of the README is measured on (ArrayParams() in System()): the paper's "
        "8 x 8 array, 6 KB operand buffer, two INT issues, 2 MiB Dbufs, 8 Cbufs of 64 KiB; "
        "4 DMA channels and 4 configuration ports.", (
        Param("rows", int, _A.rows, "PE rows"),
        Param("cols", int, _A.cols, "PE columns"),
        Param("slots", int, _A.slots, "instruction slots per PE"),
        Param("operand_depth", int, _A.operand_depth, "tokens per operand FIFO"),
        Param("dbuf_bytes", int, _A.dbuf_bytes, "bytes per Dbuf"),
        Param("cbufs", int, _A.cbufs, "Cbufs"),
        Param("cbuf_bytes", int, _A.cbuf_bytes, "bytes per Cbuf"),
        Param("depth", int, 4, "router input FIFO depth"),
        Param("int_issue", int, _A.int_issue, "INT/MEM/CTRL issues per PE and cycle (1 or 2)"),
        Param("behavioural", bool, True, "memories as behavioural SRAMs (backdoor loading)"),
        Param("dma_channels", int, _S.dma_channels, "DMA channels (edge ports with an "
              "external memory port each)"),
        Param("config_ports", int, _S.config_ports, "MicC configuration ports (1..4, "
              "dividing cbufs)"),
    )),
)}


def get_top(name):
    """Return the registered :class:`Top` called ``name``.

    Raises
    ------
    FdpuError
        If no top has that name; the message lists the registered ones.
    """
    try:
        return TOPS[name]
    except KeyError:
        raise FdpuError(f"top {name!r} is unknown; registered tops: "
                        f"{', '.join(sorted(TOPS))}") from None


def parse_params(top, assignments):
    """Parse ``["width=16", "depth=8"]`` into ``{"width": 16, "depth": 8}`` for ``top``.

    Parameters
    ----------
    top : Top or str
        The top (or its name) the parameters belong to.
    assignments : iterable of str
        ``NAME=VALUE`` texts; a later one overrides an earlier one.

    Returns
    -------
    dict
        Only the parameters given (defaults are applied by :func:`build`).

    Raises
    ------
    FdpuError
        For a text without ``=``, an unknown name or a value of the wrong type.
    """
    top = get_top(top) if isinstance(top, str) else top
    by_name = {param.name: param for param in top.params}
    values = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise FdpuError(f"--param {text!r} is malformed; expected NAME=VALUE, "
                            f"e.g. --param {top.params[0].name}={top.params[0].default!r}"
                            if top.params else
                            f"--param {text!r} is malformed; top {top.name!r} takes no "
                            f"parameters")
        if name not in by_name:
            raise FdpuError(f"top {top.name!r} has no parameter {name!r}; allowed: "
                            f"{top.describe_params()}")
        try:
            values[name] = by_name[name].parse(value)
        except ValueError as exc:
            raise FdpuError(f"--param {text!r} of top {top.name!r}: {exc}, not "
                            f"{value!r}") from None
    return values


def build(top, params=None):
    """Build the component of ``top`` with ``params`` over its defaults.

    Parameters
    ----------
    top : Top or str
        The top or its registry name.
    params : Mapping[str, object], optional
        Parameter values (already typed); missing ones take their defaults.

    Returns
    -------
    tuple of (amaranth.lib.wiring.Component, dict)
        The component and the complete parameter set it was built with.

    Raises
    ------
    FdpuError
        For an unknown top or parameter, or a value the block rejects (its own
        ``TypeError``/``ValueError`` message is kept).
    """
    top = get_top(top) if isinstance(top, str) else top
    params = dict(params or {})
    unknown = sorted(set(params) - set(top.defaults))
    if unknown:
        raise FdpuError(f"top {top.name!r} has no parameter {unknown[0]!r}; allowed: "
                        f"{top.describe_params()}")
    full = {**top.defaults, **params}
    for param in top.params:
        value = full[param.name]
        if param.most is not None and isinstance(value, int) and value > param.most:
            raise FdpuError(f"top {top.name!r}: {param.name}={value} is above the most it "
                            f"builds, {param.most} ({param.doc}; the Verilog grows with it)")
    module_name, _, attribute = top.factory.partition(":")
    factory = getattr(importlib.import_module(module_name), attribute)
    try:
        return factory(**full), full
    except (TypeError, ValueError) as exc:
        raise FdpuError(f"top {top.name!r} rejects parameters "
                        f"{', '.join(f'{k}={v!r}' for k, v in full.items())}: {exc}") from None
