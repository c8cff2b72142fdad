"""A kazoo client built from the ``[zookeeper]`` settings, and the retry policy of ZooKeeper calls.

* :func:`zookeeper_target` resolves where BookKeeper's metadata lives: the hosts and ledgers root
  of ``metadata_uri`` (``zk+hierarchical://h1:2181;h2:2181/ledgers``) when it is set, else
  ``connect`` and ``ledgers_root``.
* :func:`build_zookeeper_client` returns a configured, *not yet started* ``KazooClient``:
  session timeout, digest or SASL (DIGEST-MD5) authentication, connection and command retries.
  Credentials are revealed only into the client's arguments; kazoo's request tracing (which would
  print them) is filtered out of its logger, and nothing here logs them.
* :class:`RetryPolicy` is the retry behaviour as data: which errors are retried, the backoff
  (:class:`~scrutiny.core.backoff.Backoff`), an optional deadline and attempt limit. It runs an operation itself
  (:meth:`RetryPolicy.call`) or configures kazoo's own retry (:meth:`RetryPolicy.kazoo_retry`).

The settings are this connector's ``[zookeeper]`` section (:mod:`scrutiny.connectors.zookeeper.settings`).
"""

from __future__ import annotations

import importlib.util
import logging
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import CREATOR_ALL_ACL

from scrutiny.connectors.zookeeper.settings import AUTH_SCHEMES, ZooKeeperSection
from scrutiny.core.backoff import Backoff
from scrutiny.core.errors import ConfigError, PathError, ScrutinyError
from scrutiny.core.zk_paths import LedgerManager, check_root, parse_metadata_uri

T = TypeVar("T")

#: Errors after which the same call may succeed later: the connection or session is being re-established.
RETRYABLE_ZOOKEEPER_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
    KazooTimeoutError,
)
LOGGER_NAME = "scrutiny.zookeeper"


class RetryExhaustedError(ScrutinyError):
    """A retried operation ran out of attempts or time; ``__cause__`` is its last error."""

    def __init__(self, what: str, attempts: int, last_error: BaseException) -> None:
        self.attempts = attempts
        self.last_error = last_error
        super().__init__(f"{what} failed after {attempts} attempts: {type(last_error).__name__}: {last_error}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """ZooKeeper calls retried after :attr:`backoff`'s delays, bounded by ``deadline_seconds`` and/or ``max_attempts``.

    None means no bound. A wait never goes past the deadline. Only :attr:`retryable` errors are retried.
    """

    backoff: Backoff = Backoff(initial_s=0.1, maximum_s=10.0, multiplier=2.0, jitter=0.2)
    deadline_seconds: float | None = None
    max_attempts: int | None = None
    retryable: tuple[type[BaseException], ...] = RETRYABLE_ZOOKEEPER_ERRORS

    def __post_init__(self) -> None:
        if self.backoff.initial_s <= 0:
            raise ConfigError("a ZooKeeper retry's initial delay must be positive")
        if self.deadline_seconds is not None and self.deadline_seconds <= 0:
            raise ConfigError("retry deadline_seconds must be positive (or None)")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError("retry max_attempts must be at least 1 (or None)")

    def is_retryable(self, error: BaseException) -> bool:
        """True if ``error`` is one this policy retries."""
        return isinstance(error, self.retryable)

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        return self.backoff.delay(retry, (rng or random).random())

    def call(
        self,
        operation: Callable[[], T],
        *,
        what: str = "ZooKeeper operation",
        on_retry: Callable[[int, BaseException, float], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> T:
        """Run ``operation`` until it succeeds, retrying only retryable errors.

        ``on_retry(attempt, error, delay)`` is told before each wait (for logs and metrics). Other
        errors propagate at once; when attempts or the deadline run out, :class:`RetryExhaustedError`.
        """
        started = clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return operation()
            except self.retryable as error:
                wait = self.delay(attempt - 1, rng)
                out_of_attempts = self.max_attempts is not None and attempt >= self.max_attempts
                out_of_time = self.deadline_seconds is not None and clock() + wait - started > self.deadline_seconds
                if out_of_attempts or out_of_time:
                    raise RetryExhaustedError(what, attempt, error) from error
                if on_retry is not None:
                    on_retry(attempt, error, wait)
                sleep(wait)

    def kazoo_retry(self) -> KazooRetry:
        """The same policy as kazoo's own retry object (kazoo retries its fixed set of errors)."""
        return KazooRetry(
            max_tries=-1 if self.max_attempts is None else self.max_attempts,
            delay=self.backoff.initial_s,
            backoff=self.backoff.multiplier,
            max_jitter=self.backoff.jitter,
            max_delay=self.backoff.maximum_s,
            deadline=self.deadline_seconds,
            ignore_expire=True,
        )


#: Reconnecting: forever, 0.1 s growing to 10 s (an outage is waited out and reported, never fatal).
CONNECTION_RETRY = RetryPolicy()
#: One ZooKeeper call: retried for at most 60 s, then the caller decides (resync, report).
COMMAND_RETRY = RetryPolicy(backoff=Backoff(initial_s=0.1, maximum_s=5.0, jitter=0.2), deadline_seconds=60.0)


@dataclass(frozen=True, slots=True)
class ZooKeeperTarget:
    """Where BookKeeper's metadata lives: kazoo hosts string, ledgers root and ledger manager."""

    hosts: str
    ledgers_root: str
    manager: LedgerManager

    def describe(self) -> str:
        """For logs: hosts and root (never credentials)."""
        return f"zookeeper {self.hosts} ledgers root {self.ledgers_root} ({self.manager.value})"


def zookeeper_target(settings: ZooKeeperSection) -> ZooKeeperTarget:
    """The hosts, ledgers root and manager from ``metadata_uri`` if set, else ``connect`` and ``ledgers_root``."""
    if settings.metadata_uri:
        try:
            hosts, root, manager = parse_metadata_uri(settings.metadata_uri)
        except PathError as error:
            raise ConfigError(f"zookeeper.metadata_uri: {error}") from None
        return ZooKeeperTarget(",".join(hosts), root, manager)
    connect = settings.connect.strip()
    if not connect or any(not host.strip() for host in connect.split("/", 1)[0].split(",")):
        raise ConfigError(f"zookeeper.connect must be host:port[,host:port...][/chroot], not {settings.connect!r}")
    try:
        root = check_root(settings.ledgers_root)
    except PathError as error:
        raise ConfigError(f"zookeeper.ledgers_root: {error}") from None
    return ZooKeeperTarget(connect, root, LedgerManager.HIERARCHICAL)


@dataclass(frozen=True, slots=True)
class ZooKeeperAuth:
    """kazoo's ``auth_data`` and ``sasl_options``; its repr hides the credentials."""

    auth_data: tuple[tuple[str, str], ...] = ()
    sasl_options: dict[str, str] | None = None

    def __repr__(self) -> str:
        schemes = [scheme for scheme, _ in self.auth_data]
        mechanism = self.sasl_options.get("mechanism") if self.sasl_options else None
        return f"ZooKeeperAuth(schemes={schemes}, sasl={mechanism})"


def zookeeper_auth(settings: ZooKeeperSection) -> ZooKeeperAuth:
    """Authentication from ``auth_scheme`` / ``auth_credentials``; ConfigError on a bad combination.

    ``digest``: credentials ``user:password`` sent with ZooKeeper's addAuth. ``sasl``: SASL
    DIGEST-MD5 with ``user:password`` (needs the pure-sasl package). Empty scheme: no auth.
    """
    scheme = settings.auth_scheme.strip().lower()
    credentials = settings.auth_credentials.reveal()
    if scheme not in AUTH_SCHEMES:
        raise ConfigError(f"zookeeper.auth_scheme must be one of digest, sasl or empty, not {settings.auth_scheme!r}")
    if not scheme:
        if credentials:
            raise ConfigError("zookeeper.auth_credentials is set but zookeeper.auth_scheme is empty")
        return ZooKeeperAuth()
    user, sep, password = credentials.partition(":")
    if not sep or not user or not password:
        raise ConfigError(f"zookeeper.auth_credentials must be user:password for auth_scheme {scheme}")
    if scheme == "digest":
        return ZooKeeperAuth(auth_data=(("digest", credentials),))
    if importlib.util.find_spec("puresasl") is None:
        raise ConfigError("zookeeper.auth_scheme sasl needs the pure-sasl package, which is not installed")
    return ZooKeeperAuth(sasl_options={"mechanism": "DIGEST-MD5", "username": user, "password": password})


class _HideRequestTrace(logging.Filter):
    """Drops kazoo's below-DEBUG request tracing, whose Auth requests would show credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.DEBUG


def zookeeper_logger() -> logging.Logger:
    """The logger given to kazoo clients (filtered so that no credential is ever logged)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, _HideRequestTrace) for f in logger.filters):
        logger.addFilter(_HideRequestTrace())
    return logger


def build_zookeeper_client(
    settings: ZooKeeperSection,
    *,
    hosts: str | None = None,
    connection_retry: RetryPolicy = CONNECTION_RETRY,
    command_retry: RetryPolicy = COMMAND_RETRY,
    read_only: bool = False,
    client_class: type[KazooClient] = KazooClient,
) -> KazooClient:
    """A configured KazooClient, not started (call ``start(timeout)``; ``stop()`` and ``close()`` after).

    ``hosts`` overrides the resolved hosts string (e.g. with a chroot for tests); ``client_class``
    may be a KazooClient subclass (the watcher's persistent-watch client). With ``enable_security`` (BookKeeper's
    ``zkEnableSecurity``) the nodes it creates get ZooKeeper's creator-all ACL, as BookKeeper's own do; else the open
    ACL.
    """
    auth = zookeeper_auth(settings)
    return client_class(
        hosts=hosts if hosts is not None else zookeeper_target(settings).hosts,
        timeout=float(settings.session_timeout_seconds),
        auth_data=list(auth.auth_data) or None,
        sasl_options=auth.sasl_options,
        connection_retry=connection_retry.kazoo_retry(),
        command_retry=command_retry.kazoo_retry(),
        read_only=read_only,
        logger=zookeeper_logger(),
        default_acl=CREATOR_ALL_ACL if settings.enable_security else None,
    )


class ZooKeeperUnreachableError(ScrutinyError):
    """A client could not connect within its timeout; the message names the hosts."""


def start_zookeeper_client(
    settings: ZooKeeperSection,
    *,
    timeout_s: float,
    hosts: str | None = None,
    client_class: type[KazooClient] = KazooClient,
) -> KazooClient:
    """A client built by :func:`build_zookeeper_client` and connected within ``timeout_s`` seconds.

    On failure the client is closed and :class:`ZooKeeperUnreachableError` names the hosts and the cause. Stop the
    returned client with :func:`close_zookeeper_client`.
    """
    client = build_zookeeper_client(settings, hosts=hosts, client_class=client_class)
    try:
        start_quietly(client, timeout_s)
    except Exception as error:
        close_zookeeper_client(client)
        where = hosts if hosts is not None else zookeeper_target(settings).hosts
        cause = str(error).strip() or type(error).__name__
        raise ZooKeeperUnreachableError(f"cannot reach ZooKeeper at {where} within {timeout_s:g} s: {cause}") from None
    return client


def start_quietly(client: KazooClient, timeout_s: float) -> None:
    """``client.start(timeout_s)``, with kazoo's bare ``UserWarning`` about a missing chroot replaced by a log line.

    The line names the chroot; the command then goes on as it would (the watcher waits for BookKeeper's metadata to
    appear there, the other commands fail naming the missing ledgers root).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No chroot path exists", category=UserWarning)
        client.start(timeout=timeout_s)
    if client.chroot and client.exists("/") is None:
        logging.getLogger(LOGGER_NAME).warning(
            "the chroot %s of the ZooKeeper connect string does not exist in ZooKeeper", client.chroot
        )


def close_zookeeper_client(client: KazooClient) -> None:
    """Stop and close ``client``; an error while closing is only logged (there is nothing left to save)."""
    try:
        client.stop()
        client.close()
    except Exception as error:
        logging.getLogger(LOGGER_NAME).debug("closing a ZooKeeper client: %s", error)
