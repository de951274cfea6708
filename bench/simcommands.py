"""Commands the simulated-cluster benches run: `herder ...` as the operator's shell runs it,
and a command inside one simulated node; a failure ends the bench with its output."""

from __future__ import annotations

from herder.sim import cluster


def herder(state: cluster.SimState, *args: str, timeout: float = 1800) -> str:
    """The command's stdout and stderr (the job's log lines go to stderr); `timeout`: a
    bound for a loaded machine, not a figure."""
    done = cluster.run_cli(state, *args, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"herder {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def on_node(state: cluster.SimState, node: str, argv: list[str], timeout: float = 1800) -> str:
    """The command's stdout."""
    done = state.host(node).run(argv, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{node}: {' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout
