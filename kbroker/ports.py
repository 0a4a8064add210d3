"""Ports of 127.0.0.1 for local processes: the brokers and ZooKeeper that kbroker starts itself."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; another process may still take it before
    ours binds it, which the starters of ZooKeeper and brokers notice as a failed start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether `port` can be bound now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
