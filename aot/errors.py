"""Errors a user can act on.

Every failure caused by the input (the model file, an option, a board) is an
AotError. The CLI prints its message on one line and exits 2 whatever the
subclass; anything else escaping is a bug in aot. The subclasses are the
families a caller handles differently (docs/package.md "Errors"): catch
AotError for all of them.
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


class InputError(AotError):
    """An input array or an option is wrong: an unknown input name, a dtype or
    shape the package does not take, a value out of range, options that
    exclude each other, a model given as something that is not a model."""


class BoardUnreachableError(AotError):
    """The board cannot be reached or stopped answering: SSH connection,
    handshake, host key or authentication failures, a VM that does not boot
    or answer, a connection lost or stalled during a command."""


class MissingToolError(AotError):
    """A program or runtime aot needs is not installed: a compiler, an
    emulator, a reference runtime (`aot doctor` lists them)."""


class MismatchError(AotError):
    """The package does not match its model: outputs that differ from the
    reference runtime's (VerifyResult.check), another output count, or a
    model file that is not the one a package was built from."""


def node_label(node) -> str:
    """How errors name a node: its op and its name."""
    return f"{node.op} node '{node.name}'"
