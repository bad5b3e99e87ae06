"""`python -m aot` and the `aot` script: the CLI, with Ctrl-C handled from
the first import on (cli.main handles it once it runs)."""
import sys


def run() -> int:
    try:
        from aot.cli import main
        return main()
    except KeyboardInterrupt:
        print("aot: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
