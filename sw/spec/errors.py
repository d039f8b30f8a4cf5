"""User-facing errors.

Every mistake a user can make (a bad file, an unknown layer name, an inconsistent FD-CSR
structure, a parameter out of range) raises :class:`FdpuError` with a message that names the
input, says what is wrong and what is allowed.  The CLI prints such errors on one line and
exits with status 2, without a traceback; anything else is a bug and keeps its traceback.
Something a user should know about an input that is still accepted (weights that binary16
rounds to zero) is an :class:`FdpuWarning`, which the CLI prints as ``fdpu: warning: ...``.
:func:`deferred_warnings` holds the warnings of a step that may still refuse its input (reading
a model or a layer's files), so that a refused input gets its one error line alone.
"""

import contextlib
import warnings


class FdpuError(ValueError):
    """Raise for bad user input; the message names the input, the fault and what is allowed."""


class FdpuWarning(UserWarning):
    """Warn about accepted input that changes on the way in (the message names it)."""


@contextlib.contextmanager
def deferred_warnings():
    """Hold the warnings raised inside the block: issue them when it ends normally, drop them
    when it raises (the error then speaks for the input alone)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FdpuWarning)
        yield
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
