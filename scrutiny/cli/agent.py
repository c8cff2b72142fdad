"""``scrutiny agent``: run the bookie agent on a bookie host (DbLedgerStorage listings over gRPC).

With ``--bookie-address`` (``--ledger-dirs`` mode) or ``--forward-v3`` it also forwards ``ReadEntryHeaders`` to the
local bookie's v3 protocol; otherwise that call is answered UNIMPLEMENTED.

Binds 127.0.0.1 unless told otherwise, and refuses a non-loopback address without a token.
Runs until SIGINT or SIGTERM, then stops accepting calls, lets in-flight calls finish within
the grace period and exits 0. Configuration problems end it with exit code 2 and one line.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl

from scrutiny.agent.dbstorage import DbLedgerStorageBackend
from scrutiny.agent.server import (
    AgentMetrics,
    AgentServer,
    AgentServerConfig,
    HeaderReader,
    ListingBackend,
)
from scrutiny.agent.v3_forward import V3ForwardBackend, V3HeaderReader, V3Link
from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import (
    MAX_PORT,
    InputError,
    bounded_count,
    checked_directory,
    configure_logging,
    host_argument,
    port_argument,
    read_file_bytes,
    read_token_file,
    seconds_argument,
    stop_on_signals,
)
from scrutiny.connectors.bookies.agent_protocol import DEFAULT_MAX_LEDGERS_PER_CALL
from scrutiny.core.loopback import is_loopback
from scrutiny.settings.addresses import host_problem

DEFAULT_LISTEN = "127.0.0.1:3185"
#: The most ledgers one call may ask for (its request and answer are held in memory whole).
MAX_LEDGERS_PER_CALL = 1_000_000
#: The most calls served at once (a thread each).
MAX_CONCURRENT_CALLS = 1_024
log = logging.getLogger("scrutiny.agent")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``agent``."""
    agent = commands.add_parser(
        "agent",
        help=COMMAND_HELP["agent"],
        description="Reads the bookie's RocksDB index as a secondary instance; never writes into its directories.",
    )
    source = agent.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--ledger-dirs",
        metavar="DIR[,DIR...]",
        help="DbLedgerStorage: the bookie's ledger directories (index directories if set apart), in configured order",
    )
    source.add_argument(
        "--forward-v3",
        metavar="HOST:PORT",
        help="Sorted/Interleaved storage: forward to the bookie's own v3 protocol at HOST:PORT",
    )
    agent.add_argument(
        "--bookie-address",
        metavar="HOST:PORT",
        help="the local bookie's v3 address (usually 127.0.0.1:3181), to forward entry header reads to it "
        "(--ledger-dirs mode; --forward-v3 forwards them to its own address and accepts only that one here)",
    )
    agent.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"default {DEFAULT_LISTEN}")
    agent.add_argument("--token-file", metavar="FILE", help="file holding the shared secret callers must present")
    agent.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain (with --tls-key: serve TLS)")
    agent.add_argument("--tls-key", metavar="FILE", help="PEM private key")
    agent.add_argument(
        "--metrics-port", type=port_argument, metavar="PORT", help="serve Prometheus metrics on this port"
    )
    agent.add_argument(
        "--metrics-host", type=host_argument, default="127.0.0.1", metavar="HOST", help="default 127.0.0.1"
    )
    agent.add_argument("--state-dir", metavar="DIR", help="where the agent keeps its own files (default: temp dir)")
    agent.add_argument(
        "--bookie-id",
        type=_bookie_id,
        required=True,
        metavar="ID",
        help="the bookie id this agent serves (host:port as registered), sent with every answer",
    )
    agent.add_argument(
        "--max-ledgers-per-call",
        type=bounded_count(1, MAX_LEDGERS_PER_CALL),
        default=DEFAULT_MAX_LEDGERS_PER_CALL,
        metavar="N",
    )
    agent.add_argument(
        "--max-concurrent-calls",
        type=bounded_count(1, MAX_CONCURRENT_CALLS, "a thread each"),
        default=4,
        metavar="N",
    )
    agent.add_argument("--grace", type=seconds_argument, default=5.0, metavar="SECONDS", help="shutdown grace period")
    agent.set_defaults(handler=_run)


def _bookie_id(text: str) -> str:
    if not text.strip() or text != text.strip():
        raise argparse.ArgumentTypeError(f"a bookie id is not empty and has no surrounding blanks, got {text!r}")
    return text


def _run(args: argparse.Namespace) -> int:
    configure_logging()
    host, _port = split_listen(args.listen)
    forward = split_listen(args.forward_v3, "--forward-v3") if args.forward_v3 else None
    bookie_address = split_listen(args.bookie_address, "--bookie-address") if args.bookie_address else None
    if forward is not None and bookie_address not in (None, forward):
        raise InputError(
            f"--bookie-address {args.bookie_address} differs from --forward-v3 {args.forward_v3}: "
            "a forwarding agent reads entries from the bookie it forwards to (leave --bookie-address out)"
        )
    token = read_token_file(args.token_file) if args.token_file else None
    if token is None and not is_loopback(host):
        raise InputError(f"refusing to listen on non-loopback {args.listen} without --token-file")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise InputError("--tls-cert and --tls-key go together")
    tls = _tls_files(args.tls_cert, args.tls_key) if args.tls_cert and args.tls_key else None
    if args.state_dir is not None:
        checked_directory(args.state_dir, "state directory")
    config = AgentServerConfig(
        listen=args.listen,
        bookie_id=args.bookie_id,
        token=token,
        tls_cert_chain=tls[0] if tls else None,
        tls_private_key=tls[1] if tls else None,
        max_ledgers_per_call=args.max_ledgers_per_call,
        max_concurrent_calls=args.max_concurrent_calls,
        grace_s=args.grace,
    )
    if token is not None and config.tls_cert_chain is None and not is_loopback(host):
        log.warning("the token travels in clear text on %s: use --tls-cert/--tls-key", args.listen)
    metrics = AgentMetrics()
    backend: ListingBackend
    header_reader: HeaderReader | None = None
    if forward is not None:
        backend = header_reader = V3ForwardBackend(*forward)
        sources = 1
    else:
        dirs = [d for d in args.ledger_dirs.split(",") if d]
        backend = DbLedgerStorageBackend(dirs, state_dir=args.state_dir, on_catch_up=metrics.observe_catch_up)
        sources = len(dirs)
        if bookie_address is not None:
            header_reader = V3HeaderReader(V3Link(*bookie_address))
    server = AgentServer(backend, config, metrics, header_reader=header_reader)
    try:
        _start(server, metrics, args, sources)
        _wait_for_signal()
    finally:
        server.stop()
        metrics.stop()
    log.info("scrutiny agent stopped")
    return 0


def _start(server: AgentServer, metrics: AgentMetrics, args: argparse.Namespace, dirs: int) -> None:
    for source in server.backend.health():
        if not source.ok:
            log.warning("source %d (%s) is not readable yet: %s", source.index, source.path, source.reason)
    port = server.start()
    host, _ = split_listen(args.listen)
    shown = f"[{host}]" if ":" in host else host
    reads = args.forward_v3 or args.bookie_address
    log.info(
        "scrutiny agent listening on %s:%d (bookie id %r, %d sources, TLS %s, token %s, entry reads %s)",
        shown,
        port,
        args.bookie_id,
        dirs,
        "on" if server.config.tls_cert_chain is not None else "off",
        "required" if server.config.token is not None else "off",
        f"forwarded to {reads}" if reads else "off (no --bookie-address)",
    )
    if args.metrics_port is not None:
        metrics_port = metrics.serve(args.metrics_port, args.metrics_host)
        log.info("metrics on http://%s:%d/metrics", args.metrics_host, metrics_port)


def _wait_for_signal() -> None:
    def note(signum: int) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)

    with stop_on_signals(note) as stop:
        while not stop.wait(0.5):
            pass


def _tls_files(cert: str, key: str) -> tuple[bytes, bytes]:
    """The bytes of ``--tls-cert`` and ``--tls-key``, once they load as a PEM chain and its key (InputError if not)."""
    chain, private_key = read_file_bytes(cert), read_file_bytes(key)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, OSError) as error:
        reason = getattr(error, "reason", None) or error.strerror or error
        raise InputError(
            f"--tls-cert {cert} and --tls-key {key} are not a PEM certificate chain and its private key ({reason})"
        ) from None
    return chain, private_key


def split_listen(listen: str, option: str = "--listen") -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` as (host, port); raises :class:`InputError` naming ``option``."""
    host, sep, port = listen.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > MAX_PORT:
        raise InputError(f"{option} expects HOST:PORT, not {listen!r}")
    problem = host_problem(host)
    if problem is not None:
        raise InputError(f"{option} {listen!r}: the host {host!r} {problem}")
    return host, int(port)
