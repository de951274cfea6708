"""herder: watches, heals and places virtual machines across a cluster of hypervisor nodes."""

from __future__ import annotations

from functools import cache
from pathlib import Path

# A tree that was never installed (no metadata anywhere on the path): no build to name.
UNKNOWN_VERSION = "0.0.0+unknown"


@cache
def _build_version() -> str:
    """The version of the build this package was installed from (setuptools-scm made it from
    git at build time; docs/install.md "Versions"). Read from the installed metadata, not from
    a file in the tree, so building writes nothing into a checkout. Where several `herder`
    distributions are on the path (a venv that borrows another's libraries), the one that
    installed this very file wins; an editable install of a checkout names the version of its
    last `pip install -e`."""
    from importlib import metadata  # ~50 ms: only for the modules that name the version

    here = Path(__file__).resolve()
    found = list(metadata.distributions(name="herder"))
    # An installed distribution's .dist-info counts before an .egg-info: the one an editable
    # install leaves in the checkout's src/ keeps the version of the first install.
    installed = [d for d in found if str(getattr(d, "_path", "")).endswith(".dist-info")]
    for dist in installed:
        try:
            if Path(str(dist.locate_file("herder/__init__.py"))).resolve() == here:
                return str(dist.version)
        except OSError:
            continue
    return str((installed or found)[0].version) if found else UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    """`herder.__version__`, looked up on first use (PEP 562): the allocator's fast path and
    other short commands that never name it do not pay for importlib.metadata."""
    if name == "__version__":
        return _build_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
