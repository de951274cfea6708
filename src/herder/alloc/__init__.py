"""herder's allocator: Ganeti's iallocator protocol (hail-compatible), balance and capacity.

Library use::

    from herder.alloc import answer, Options
    response = answer(request_bytes, Options())   # -> Response(success, info, result)
    print(response.to_json())

``answer`` raises :class:`InputError` for input it cannot use at all.
"""

from __future__ import annotations

from typing import Any

from herder.alloc.model import Cluster
from herder.alloc.protocol import (
    InputError,
    Options,
    Response,
    build_cluster,
    get,
    parse_message,
    request_of,
)
from herder.alloc.wire import Message
from herder.core import gcpause

__all__ = ["Cluster", "InputError", "Options", "Response", "answer", "answer_message"]


def answer(data: bytes | str, opts: Options | None = None,
           cluster: Cluster | None = None) -> Response:
    """Answer one iallocator request given as JSON text.

    ``cluster`` replaces the cluster described in the message (hail's ``-t``/``--simulate``).
    """
    with gcpause.paused():
        return answer_message(parse_message(data), opts, cluster)


def answer_message(msg: Message | dict[str, Any], opts: Options | None = None,
                   cluster: Cluster | None = None) -> Response:
    """Answer a parsed message (``parse_message``) or a library caller's dict of one."""
    from herder.alloc.modes import handler

    opts = opts or Options()
    # the model of a big cluster is hundreds of thousands of containers, none of them cyclic
    with gcpause.paused():
        req = request_of(msg)
        if cluster is None:
            cluster = build_cluster(msg, opts)
        kind = get(req, "type", "str", "invalid request dict")
        run = handler(kind)
        if run is None:
            raise InputError(f"Invalid request type '{kind}'")
        return run(cluster, req, opts)
