"""``python -m herder.cli.iallocator FILE|-``: the iallocator script's entry point (what
``herder alloc install`` makes Ganeti run), without the full herder CLI.

Same options and behaviour as ``herder alloc``. Ganeti runs an iallocator once per allocation,
so start-up counts: the plain call (one request file or ``-``, no options — how Ganeti calls
it without default iallocator parameters) is answered through the allocator's library API
without importing click (about 12 ms of a ~60 ms run); anything else goes through the click
command. It lives in the CLI because the allocator itself imports no front end.
"""

from __future__ import annotations

import sys


def _plain(argv: list[str]) -> int | None:
    """Answer `argv` = [FILE|-] directly; None when the click command must handle it."""
    if len(argv) != 1 or (argv[0].startswith("-") and argv[0] != "-") or argv[0] == "install":
        return None
    from herder.alloc import InputError, answer_message
    from herder.alloc.protocol import parse_message
    from herder.core import gcpause

    path = argv[0]
    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()  # noqa: SIM115
    except OSError as err:
        print(f"Error: cannot read {path}: {err.strerror}", file=sys.stderr)
        return 1
    try:
        with gcpause.paused():  # decoding a big request: many containers, none of them cyclic
            msg = parse_message(data)
        del data  # the request's bytes (48 MB at 10,000 nodes) are not needed any more
        response = answer_message(msg)
    except InputError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 1
    sys.stdout.write(response.to_json() + "\n")
    return 0


if __name__ == "__main__":
    code = _plain(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from herder.cli.alloc import alloc

    alloc(prog_name="herder-alloc")
