"""The exception hierarchy: every error retarget raises on purpose derives from :class:`RetargetError`.

Subpackages define their own subclasses next to the code that raises them (for example the simulator's
non-convergence error carries step, time and residual norms); this module holds the root and the errors shared
across subpackages.
"""


class RetargetError(Exception):
    """Root of all deliberate retarget errors. The CLI prints these without a traceback and exits 2."""


class InputError(RetargetError, ValueError):
    """A user-supplied file, argument or message is malformed. The message names the offending item."""


class NotAvailableError(RetargetError):
    """A requested feature is not built yet. Raised instead of returning a fake result."""
