"""What the kernel holds of loopback connections, for tests that must know the server has read what was sent."""

from __future__ import annotations

import time
from pathlib import Path


def unread_bytes(port: int) -> int:
    """Bytes of the TCP connections to or from `port` on loopback not yet read by their receiving end
    (/proc/net/tcp: each socket's send and receive queues)."""
    queued = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":")[1], fields[2].split(":")[1]
        if port in (int(local, 16), int(remote, 16)):
            sending, receiving = fields[4].split(":")
            queued += int(sending, 16) + int(receiving, 16)
    return queued


def wait_until_read(port: int, seconds: float = 120) -> None:
    """Return once every byte sent on loopback connections to `port` has been read (AssertionError after `seconds`)."""
    deadline = time.monotonic() + seconds
    while unread_bytes(port):
        assert time.monotonic() < deadline, f"bytes sent to port {port} still unread after {seconds} s"
        time.sleep(0.001)
