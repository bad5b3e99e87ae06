"""`python -m aot` and the `aot` script: the CLI, with Ctrl-C handled from
the first import on (cli.main handles it once it runs)."""
import os
import signal
import sys

from aot.errors import EXIT_INTERRUPTED


def _import_cli():
    """aot.cli and the libraries it loads, with Ctrl-C held until they are
    in: an extension module interrupted while it initializes (numpy's, as
    it imports datetime) raises ImportError, not KeyboardInterrupt, and the
    user would see a traceback for pressing Ctrl-C."""
    held = []
    previous = signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        from aot.cli import main
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt
    return main


def run() -> int:
    try:
        main = _import_cli()
        code = main()
    except KeyboardInterrupt:
        print("aot: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        # CPython remembers a KeyboardInterrupt that escaped code an extension
        # module ran while being imported, and then ends the process by
        # SIGINT whatever exit code it was given (an early Ctrl-C exited -2
        # in about 1 run of 15). Everything aot cleans up has been cleaned
        # when main returns: leave with the code now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(run())
