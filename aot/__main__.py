import sys


def _main() -> int:
    try:
        from aot.cli import main
        return main()
    except KeyboardInterrupt:     # before cli.main's own handler is in place (imports)
        print("aot: interrupted", file=sys.stderr)
        return 130


sys.exit(_main())
