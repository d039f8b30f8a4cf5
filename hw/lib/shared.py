"""Share one Verilog module between many identical instances of a component.

Amaranth writes every instance of a component as a Verilog module of its own: an 8 x 8 array
of PEs becomes 64 copies of the PE's text, and Verilator compiles each one.  :class:`Shared`
wraps a component so that :func:`hw.tooling.verilog.to_verilog` emits it **once**, as a module named
after its key, and instantiates that module wherever the wrapper appears.  Simulators then
compile the module once and the text grows with the number of distinct blocks, not instances.

Contract:

* The wrapped component must behave the same in every instance of one key: per-instance facts
  (a PE's coordinate) must be input ports driven by the parent, not constructor parameters.
  ``key`` names what makes instances identical (the parameters); the caller is responsible for
  it, and the module name carries a hash of the generated text, so two different designs can
  never share a name.
* Sharing is active only while :func:`hw.tooling.verilog.to_verilog` runs.  Everywhere else
  (Amaranth's simulator, RTLIL for synthesis) the wrapper elaborates to the plain component,
  connected port for port, so the same design object works in every flow.
* The shared module's ports are the component's signature members, flattened the way Amaranth
  names top-level ports (``i_flit__valid``, ``i_flit__payload``...), plus ``clk``/``rst`` when
  the module has them.
"""

import contextlib
import hashlib
import re

from amaranth import ClockSignal, Instance, Module, ResetSignal
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import ValueCastable
from amaranth.lib import wiring

__all__ = ["Shared", "sharing", "definitions", "shared_modules", "convert_plain", "MARKER"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Set by :func:`sharing` while to_verilog converts a design: key -> (module name, text).
_active = None


@contextlib.contextmanager
def sharing():
    """Collect the shared modules a conversion instantiates (used by ``to_verilog``).

    Yields
    ------
    dict
        ``{key: (module_name, verilog_text)}`` filled as wrappers elaborate; nested calls reuse
        the outer collection, so a shared module inside a shared module is emitted once.
    """
    global _active
    if _active is not None:
        yield _active
        return
    _active = {}
    try:
        yield _active
    finally:
        _active = None


#: Comment line written before each shared module's text; simulator harnesses find the shared
#: modules by it (:func:`shared_modules`), e.g. to compile each one once in Verilator.
MARKER = "// hw.lib.shared module: "


def definitions(collected):
    """Return the Verilog text of every collected shared module, in a stable order."""
    return "".join(f"{MARKER}{name}\n{text}"
                   for _key, (name, text) in sorted(collected.items(), key=lambda kv: kv[1][0]))


def shared_modules(verilog):
    """Return the names of the shared modules defined in ``verilog`` (from ``to_verilog``)."""
    return re.findall(rf"^{re.escape(MARKER)}(\w+)$", verilog, re.MULTILINE)


def _ports(component):
    """Yield ``(port_name, value, is_input)`` for the flattened signature of ``component``."""
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        yield "__".join(map(str, path)), value, member.flow == wiring.In


def convert_plain(component, name):
    """Convert ``component`` to Verilog text alone (module ``name``), without the shared
    modules' definitions; :func:`hw.tooling.verilog.to_verilog` is the public entry."""
    return amaranth_verilog.convert(component, name=name, emit_src=False)


class Shared(wiring.Component):
    """Wrap ``component`` so all wrappers with the same ``key`` share one Verilog module.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The block to instantiate; its signature becomes the wrapper's.
    key : hashable
        What makes two instances identical, e.g. ``("pe", params)``.  Wrappers with equal keys
        must wrap components that generate the same Verilog.
    name : str
        Base name of the Verilog module (a plain identifier); a hash of the text is appended.

    Raises
    ------
    TypeError
        If ``component`` is not a ``wiring.Component`` or ``key`` is not hashable.
    ValueError
        If ``name`` is not a plain Verilog identifier.
    """

    def __init__(self, component, *, key, name):
        self._MustUse__silence = True   # re-armed below once the arguments are valid
        if not isinstance(component, wiring.Component):
            raise TypeError(f"component must be an amaranth.lib.wiring.Component, not "
                            f"{component!r}")
        try:
            hash(key)
        except TypeError as exc:
            raise TypeError(f"key must be hashable, not {key!r}") from exc
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise ValueError(f"name must be a Verilog identifier (letters, digits and '_', "
                             f"not starting with a digit), not {name!r}")
        self.component, self.key, self.name = component, key, name
        self._MustUse__silence = False
        super().__init__(component.signature)

    def _definition(self):
        """Return ``(module_name, text)`` of the shared module, generating it once per key."""
        if self.key not in _active:
            placeholder = f"{self.name}__shared"
            text = convert_plain(self.component, placeholder)
            digest = hashlib.sha1(text.encode()).hexdigest()[:10]
            module = f"{self.name}_{digest}"
            # Amaranth prefixes submodules with the top name (``placeholder.sub``), so one
            # substitution renames the module and all of its submodules.
            _active[self.key] = (module, text.replace(placeholder, module))
        else:
            # This instance is not elaborated: only the first of a key is converted.
            self.component._MustUse__silence = True
        return _active[self.key]

    def elaborate(self, platform):
        m = Module()
        if _active is None:
            m.submodules.inner = self.component
            for (name, outer, is_input), (_n, inner, _i) in zip(_ports(self),
                                                                 _ports(self.component)):
                if is_input:
                    m.d.comb += inner.eq(outer)
                else:
                    m.d.comb += outer.eq(inner)
            return m
        module, text = self._definition()
        header = text[text.index(f"module {module}("):].split(";", 1)[0]
        kwargs = {}
        for name, value, is_input in _ports(self):
            kwargs[("i_" if is_input else "o_") + name] = value
        if re.search(r"\bclk\b", header):
            kwargs["i_clk"] = ClockSignal()
        if re.search(r"\brst\b", header):
            kwargs["i_rst"] = ResetSignal()
        m.submodules.shared = Instance(module, **kwargs)
        return m
