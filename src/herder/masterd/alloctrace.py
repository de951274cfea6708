"""Where a masterd's memory goes, while it grows (a debugging aid, off unless asked).

With `HERDER_TRACEMALLOC=PATH` in its environment, masterd starts `tracemalloc` (frames kept
per allocation: `HERDER_TRACEMALLOC_FRAMES`, default 12) before it loads its config, and a
daemon thread appends to PATH every `HERDER_TRACEMALLOC_EVERY` seconds (default 1): the time,
the process's RSS, the traced total, the top allocation sites by traceback against the first
snapshot (what grew since the start), and every thread's current stack (which loop is making
the objects). Written for issue 36 goal 6 (masterd's memory ran away on etcd at 50,000
instances), where a py-spy was not at hand and the growth was too fast (1 GB in 5 s) to catch
by hand. It costs CPU and about as much memory again as what it traces: never on in
production.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import tracemalloc
from pathlib import Path

ENV = "HERDER_TRACEMALLOC"
TOP = 12  # allocation sites per dump


def rss_mib() -> float:
    """This process's resident set, in MiB (0 where /proc has no status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def dump(out: Path, base: tracemalloc.Snapshot, started: float) -> None:
    """One dump of the growth since `base` and of every thread's stack, appended to `out`."""
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"=== t={time.monotonic() - started:.1f}s rss={rss_mib():.0f}MiB "
             f"traced={current / 2**20:.0f}MiB peak={peak / 2**20:.0f}MiB"]
    for stat in snapshot.compare_to(base, "traceback")[:TOP]:
        lines.append(f"--- {stat.size_diff / 2**20:+.1f} MiB in {stat.count_diff:+d} blocks "
                     f"(now {stat.size / 2**20:.1f} MiB)")
        lines.extend(f"    {frame.filename}:{frame.lineno}" for frame in stat.traceback)
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = traceback.extract_stack(frame)[-8:]
        lines.append(f"thread {names.get(ident, ident)}: " + " <- ".join(
            f"{Path(f.filename).name}:{f.lineno}:{f.name}" for f in reversed(stack)))
    with out.open("a") as file:
        file.write("\n".join(lines) + "\n")


def start_from_env() -> bool:
    """Start tracing and dumping when `HERDER_TRACEMALLOC` names a file; whether it did."""
    target = os.environ.get(ENV)
    if not target or tracemalloc.is_tracing():
        return False
    tracemalloc.start(int(os.environ.get(f"{ENV}_FRAMES", "12")))
    every = float(os.environ.get(f"{ENV}_EVERY", "1"))
    out = Path(target)
    base = tracemalloc.take_snapshot()
    started = time.monotonic()

    def loop() -> None:
        while True:
            time.sleep(every)
            try:
                dump(out, base, started)
            except Exception as err:  # a debugging aid never stops masterd
                with out.open("a") as file:
                    file.write(f"dump failed: {err!r}\n")

    threading.Thread(target=loop, name="alloctrace", daemon=True).start()
    return True
