"""Listening sockets for ``proxy serve`` and ``proxy demo``: check a port before doing any work.

``proxy serve`` on a taken port used to migrate the database and start its
chronon loop before uvicorn failed to bind, with an 85-line traceback (issue 23).
:func:`bind_problem` says in one line why a port cannot be listened on;
:func:`listen_socket` binds one (the preferred port, else a free one) so the
caller hands uvicorn the very socket it checked. Standard library only: the
CLI imports it before anything heavy.
"""

from __future__ import annotations

import random
import socket
from collections import deque
from pathlib import Path

__all__ = ["bind_problem", "listen_socket"]


def _bound(host: str, port: int) -> socket.socket:
    """A TCP socket bound (not listening) to ``host:port``; raises ``OSError``."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a port left in TIME_WAIT by a previous run is free to reuse.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, in one line; ``None`` if it can (it is released)."""
    try:
        _bound(host, port).close()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return f"cannot listen on {host}:{port}: {reason}"
    return None


def listen_socket(host: str, port: int, *, fallback: bool = True) -> tuple[socket.socket, bool]:
    """A socket bound to ``host:port``, or (``fallback``) to a free port when that one is taken.

    Returns the socket and whether it is the fallback (its port is ``getsockname()[1]``).
    Raises ``OSError`` when neither can be bound.
    """
    try:
        return _bound(host, port), False
    except OSError:
        if not fallback or port == 0:
            raise
    return _bound(host, 0), True


#: Where :func:`free_port` picks from: below the ephemeral range, which the system draws both
#: ``bind(port 0)`` and every outgoing connection's local port from.
_LOWEST_PICK = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_picker = random.Random()  # its own state: a test's seeding of `random` must not align workers
_handed_out: deque[int] = deque(maxlen=4096)


def _below_ephemeral() -> range | None:
    """The ports under the system's ephemeral range, from :data:`_LOWEST_PICK`; ``None`` if unknown."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_LOWEST_PICK, low) if low - _LOWEST_PICK >= 1000 else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, for a child process to take.

    Picked at random below the ephemeral range (where the system has one, as Linux does), not
    by the system from it: an outgoing connection's local port comes from that range, so a
    port picked there could be taken by any connection made before the child binds it (issue
    48: a test's worker, started seconds after its port was picked, found it in use). Not one
    handed out recently by this process. Another process may still bind it first.
    """
    ports = _below_ephemeral()
    if ports is not None:
        for port in (_picker.choice(ports) for _ in range(200)):
            if port not in _handed_out and bind_problem(host, port) is None:
                _handed_out.append(port)
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
