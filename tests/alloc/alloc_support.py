"""Shared helpers of the allocator tests: where the conformance data and the peers live."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("HERDER_SHARED", REPO.parent / "shared"))
CONF = SHARED / "conformance" / "ganeti"
HTOOLS = CONF / "htools"
REFERENCE = CONF / "shelltest_reference_outputs_3.0.2.jsonl"
GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
HAIL = GROOT / "bin" / "hail"


def reference_cases(*files: str) -> list[dict[str, Any]]:
    """The recorded shell-test cases (command, expectations, real outputs) of some files."""
    if not REFERENCE.exists():
        return []
    out = []
    with REFERENCE.open() as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["file"] in files:
                out.append(rec)
    return out


needs_shared = pytest.mark.skipif(not HTOOLS.is_dir(), reason=f"{HTOOLS} not present")
needs_hail = pytest.mark.skipif(not HAIL.exists(), reason=f"{HAIL} not present")


def herder_bin() -> str:
    exe = REPO / ".venv" / "bin" / "herder"
    if exe.exists():
        return str(exe)
    found = shutil.which("herder")
    if found is None:
        pytest.skip("herder executable not installed")
    return found
