"""A free TCP port on 127.0.0.1, for a server a test starts or a port nobody listens on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS just handed out and released: free now, though nothing reserves it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The same port under the name a test wants when it needs a connection to be refused: released,
# so nobody listens on it.
closed_port = free_port
