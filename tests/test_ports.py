"""Ports for children the tests and benchmarks start (``proxy.ports``): picked where no
outgoing connection can take them first (issue 48), and said clearly when taken."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from proxy import ports
from proxy.ports import bind_problem, free_port, listen_socket


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


@pytest.mark.skipif(not Path("/proc/sys/net/ipv4/ip_local_port_range").exists(),
                    reason="no ephemeral range to stay below (not Linux)")
async def test_free_ports_lie_below_the_ephemeral_range_where_connections_take_theirs() -> None:
    low = _ephemeral_low()
    picked = [free_port() for _ in range(50)]
    assert all(ports._LOWEST_PICK <= port < low for port in picked)
    assert len(set(picked)) == 50  # none handed out twice by this process
    # Outgoing connections take their local ports from the ephemeral range: never one of ours.
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    target = server.sockets[0].getsockname()[1]
    local_ports = []
    for _ in range(20):
        _, writer = await asyncio.open_connection("127.0.0.1", target)
        local_ports.append(writer.get_extra_info("sockname")[1])
        writer.close()
    server.close()
    await server.wait_closed()
    assert all(port >= low for port in local_ports)
    assert not set(local_ports) & set(picked)


def test_a_free_port_is_bindable_and_a_listening_one_is_never_picked() -> None:
    port = free_port()
    assert bind_problem("127.0.0.1", port) is None
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        problem = bind_problem("127.0.0.1", port)
        assert problem is not None and f"127.0.0.1:{port}" in problem
        assert port not in {free_port() for _ in range(200)}


def test_listen_socket_falls_back_to_a_free_port_only_when_asked() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sock, fallback = listen_socket("127.0.0.1", port)
        with sock:
            assert fallback and sock.getsockname()[1] != port
        with pytest.raises(OSError):
            listen_socket("127.0.0.1", port, fallback=False)
