"""Whether an address reaches this machine only: the one rule the agent, the dashboard and the checker's bookie
access share (binding without a token, sending a token in clear text)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost``, or a loopback IP address (127.0.0.0/8, ::1; brackets allowed). A host name other than
    localhost is not: it may resolve to any interface."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
