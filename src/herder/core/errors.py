"""Errors shared by every component. Each carries a message fit for one line on stderr."""

from __future__ import annotations


class HerderError(Exception):
    """Base of herder's own errors: the message is meant for the operator, as is."""


class ConfigError(HerderError, ValueError):
    """The config document (or a change to it) is invalid; nothing was written.

    A ValueError too, so msgspec reports it with the path of the offending field.
    """


class ParameterError(ConfigError):
    """A parameter is unknown, of the wrong type, or not allowed at this level."""


class NotFoundError(HerderError):
    """No object matches the given name or UUID."""


class AmbiguousError(HerderError):
    """A short name matches more than one object."""


class ExistsError(HerderError):
    """An object with that name or UUID already exists."""


class StoreError(HerderError):
    """The config store cannot be read or written (missing, truncated, locked, I/O)."""


class SignatureError(HerderError):
    """A signed message is malformed or its HMAC does not verify."""


class OpPrereqError(HerderError):
    """An opcode's prerequisites do not hold (Ganeti's OpPrereqError); nothing was changed."""

    ganeti_class = "OpPrereqError"

    def __init__(self, message: str, code: str = "wrong_input") -> None:
        super().__init__(message)
        self.ganeti_args = [message, code]


class OpExecError(HerderError):
    """An opcode failed while executing (Ganeti's OpExecError)."""

    ganeti_class = "OpExecError"


class RpcError(OpExecError):
    """A node RPC failed or the node could not be reached."""
