"""Errors a user can act on.

Every failure caused by the input (the model file, an option, a board) is an
AotError. The CLI prints its message on one line and exits 2; anything else
escaping is a bug in aot.
"""

# The exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report).
EXIT_INTERRUPTED = 130


class AotError(Exception):
    """Base class: a user-facing error with a one-line message."""


class ModelError(AotError):
    """The model file is unreadable, truncated, corrupt or inconsistent."""


class UnsupportedError(AotError):
    """The model uses something aot does not support (op, attribute, dtype)."""


class ShapeError(AotError):
    """A shape or type is invalid: zero or negative dims, mismatched operands."""


class BudgetError(AotError):
    """The model needs more compile-time memory or board flash than allowed."""


class NotImplementedYet(AotError):
    """A feature of aot that is planned but not built yet."""


def node_label(node) -> str:
    """How errors name a node: its op and its name."""
    return f"{node.op} node '{node.name}'"
