"""`python -m kvbench` and the `kvbench` script. The CLI's import takes a good fraction of a
second: a Ctrl-C during it is an interruption like any other (exit 130), not a traceback."""

import sys


def run() -> None:
    try:
        from kvbench.cli import main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
