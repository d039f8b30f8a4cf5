"""User-facing errors.

Every mistake a user can make (a bad file, an unknown layer name, an inconsistent FD-CSR
structure, a parameter out of range) raises :class:`FdpuError` with a message that names the
input, says what is wrong and what is allowed.  The CLI prints such errors on one line and
exits with status 2, without a traceback; anything else is a bug and keeps its traceback.
Something a user should know about an input that is still accepted (weights that binary16
rounds to zero) is an :class:`FdpuWarning`, which the CLI prints as ``fdpu: warning: ...``.
"""


class FdpuError(ValueError):
    """Raise for bad user input; the message names the input, the fault and what is allowed."""


class FdpuWarning(UserWarning):
    """Warn about accepted input that changes on the way in (the message names it)."""
