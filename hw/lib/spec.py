"""Bridges from :mod:`sw.spec` (plain Python, no Amaranth) to the hardware.

* :func:`shaped_enum` turns a spec :class:`enum.IntEnum` into an Amaranth enum with an explicit
  shape, the same names and the same values, so a state register is typed in the hardware and
  named by the same definition in the software.
* :func:`check_params` is the parameter check every block that takes an
  :class:`sw.spec.arch.ArrayParams` starts with.
"""

import types

from amaranth.hdl import Shape
from amaranth.lib import enum

from sw.spec.arch import ArrayParams

__all__ = ["shaped_enum", "check_params"]


def shaped_enum(spec_enum, shape, *, name=None, module=None):
    """Return an ``amaranth.lib.enum.Enum`` with the members of ``spec_enum`` and ``shape``.

    Parameters
    ----------
    spec_enum : type of enum.Enum
        The definition in :mod:`sw.spec` (integer values).
    shape : shape-like
        The explicit shape; every value must fit it (Amaranth checks).
    name : str, optional
        The class name (default: that of ``spec_enum``).
    module : str, optional
        The ``__module__`` of the class (the hardware module that defines it).
    """
    def members(namespace):
        for member in spec_enum:
            namespace[member.name] = member.value
        namespace["__module__"] = module or spec_enum.__module__
        namespace["__doc__"] = (f":class:`{spec_enum.__module__}.{spec_enum.__qualname__}` with "
                                f"the shape {Shape.cast(shape)!r}.")
    return types.new_class(name or spec_enum.__name__, (enum.Enum,), {"shape": shape}, members)


def check_params(params):
    """Raise ``TypeError`` unless ``params`` is an :class:`sw.spec.arch.ArrayParams`."""
    if not isinstance(params, ArrayParams):
        raise TypeError(f"params must be an sw.spec.arch.ArrayParams, not {params!r}")
