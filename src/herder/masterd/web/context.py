"""What masterd's web console keeps beside the RAPI's context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from herder.masterd.web.overview import Overview
from herder.masterd.web.samples import NodeSamples
from herder.masterd.web.sessions import SessionStore


@dataclass
class WebContext:
    sessions: SessionStore = field(default_factory=SessionStore)
    samples: NodeSamples = field(default_factory=NodeSamples)
    # maintd's read API (incidents, rounds, notifications, diagnose reports); None: the
    # cluster's master IP on maintd's port
    maintd_url: str | None = None
    # the last answer of maintd: (monotonic time, overview or None, why none)
    maintd_last: tuple[float, dict[str, Any] | None, str | None] | None = None
    overview_last: tuple[float, Overview] | None = None  # (monotonic time, overview)
