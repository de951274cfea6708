"""herder confd: fast, authenticated, highly available read access to the cluster config.

`queries` answers each query type from a config (pure functions); `server` is the UDP daemon.
The protocol itself (constants, packets, the client) lives in `herder.core.confd`.
"""
