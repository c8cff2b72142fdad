"""Host names and ZooKeeper connect strings, checked by their spelling before anything resolves, binds or connects.

Nothing here looks a name up or opens a socket: a host is an IP address (IPv6 optionally in brackets) or a name
of dot-separated labels (letters, digits, ``-`` and ``_``, 63 characters at most each, 253 in all, not all digits);
a ZooKeeper connect string is ``host[:port][,host[:port]...][/chroot]`` and Kafka's bootstrap servers
``host:port[,host:port...]``, IPv6 hosts in brackets, ports 1-65535.
Each function returns what is wrong (a phrase to follow the value's name) or None, so the settings loader and
the command line can word the error their own way.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

_LABEL: Final = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_MAX_NAME: Final = 253
_BRACKETED: Final = re.compile(r"\[(?P<host>[^\]]*)\](?::(?P<port>[^:]*))?")
_MAX_PORT: Final = 65_535


def host_problem(text: str) -> str | None:
    """Why ``text`` is neither an IP address nor a host name; None when it is one."""
    if not text.strip():
        return "is empty"
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(inner)
    except ValueError:
        pass
    else:
        return None
    if inner != text or ":" in text:
        return "is not an IP address or a host name"
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    if len(text) > _MAX_NAME or not all(_LABEL.fullmatch(label) for label in labels):
        return "is not an IP address or a host name"
    if all(label.isdigit() for label in labels):
        return "is not an IP address (each of its four numbers is 0-255)"
    return None


def zookeeper_connect_problem(text: str) -> str | None:
    """Why ``text`` is not ``host[:port][,host[:port]...][/chroot]``; None when it is (or is empty)."""
    servers = text.strip().partition("/")[0]
    if not servers:
        return None if not text.strip() else "names no ZooKeeper server before its chroot"
    for server in (s.strip() for s in servers.split(",")):
        problem = _server_problem(server, port_required=False)
        if problem is not None:
            return f"is not host:port[,host:port...][/chroot]: {problem}"
    return None


def kafka_servers_problem(text: str) -> str | None:
    """Why ``text`` is not ``host:port[,host:port...]``; None when it is (or is empty)."""
    if not text.strip():
        return None
    for server in (s.strip() for s in text.split(",")):
        problem = _server_problem(server, port_required=True)
        if problem is not None:
            return f"is not host:port[,host:port...]: {problem}"
    return None


def _server_problem(server: str, *, port_required: bool) -> str | None:
    if not server:
        return "an empty server"
    bracketed = _BRACKETED.fullmatch(server)
    if bracketed is not None:
        host, port = f"[{bracketed.group('host')}]", bracketed.group("port")
    elif server.count(":") > 1:
        return f"{server!r} (an IPv6 address goes in brackets: [::1]:2181)"
    else:
        host, sep, after = server.partition(":")
        port = after if sep else None
    problem = host_problem(host)
    if problem is not None:
        return f"host {host!r} {problem}"
    if port is None and port_required:
        return f"{server!r} has no port"
    if port is not None and not (port.isdigit() and 1 <= int(port) <= _MAX_PORT):
        return f"port {port!r} of {server!r} is not a number from 1 to {_MAX_PORT}"
    return None
