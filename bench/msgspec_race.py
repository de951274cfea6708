"""Threads decoding into a msgspec Struct type for the first time at once (docs/ha.md "Fatal
signals"): msgspec 0.22.0 crashed with SIGSEGV here (2 of 13 runs of 3,000 types), 0.23.0 did
not (32 runs). Each round defines fresh nested Struct types and lets 8 threads, released by one
barrier, decode into them; the run prints "ok" or dies of the signal (faulthandler's traceback).

    python bench/msgspec_race.py [ROUNDS]   (default 3000; exit code 139 on a crash)
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import types

import msgspec

THREADS = 8
TYPES = '''
from typing import Optional
import msgspec
class Leaf(msgspec.Struct, kw_only=True):
    a: int = 0
    b: str = ""
    c: list[int] = []
    d: dict[str, "Leaf"] = {}
class Mid(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    leaf: Optional[Leaf] = None
    leaves: list[Leaf] = []
class Top(msgspec.Struct, kw_only=True):
    mid: Optional[Mid] = None
    mids: dict[str, Mid] = {}
    x: int | None = None
'''
DATA = msgspec.json.encode({"mid": {"leaf": {"a": 1, "d": {"k": {"a": 2}}},
                                    "leaves": [{"a": 3}]}, "mids": {"z": {}}, "x": 3})


def fresh_type(index: int) -> type:
    """A new module's Top type (its Leaf and Mid new too: no decoding information yet)."""
    module = types.ModuleType(f"msgspec_race_{index}")
    sys.modules[module.__name__] = module  # the forward reference "Leaf" resolves in it
    exec(TYPES, module.__dict__)  # fixed text: the types are what is tested
    top: type = module.__dict__["Top"]
    return top


def main(rounds: int) -> None:
    faulthandler.enable()
    for index in range(rounds):
        top = fresh_type(index)
        barrier = threading.Barrier(THREADS)

        def decode(kind: type = top, start: threading.Barrier = barrier) -> None:
            start.wait()
            for _ in range(3):
                msgspec.json.decode(DATA, type=kind)
                msgspec.convert({"mid": {}}, kind)

        threads = [threading.Thread(target=decode) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(f"ok: {rounds} rounds, msgspec {msgspec.__version__}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
