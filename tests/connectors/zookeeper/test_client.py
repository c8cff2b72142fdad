"""The ZooKeeper client's pure parts: retry policy, where the metadata lives, authentication, no secret in sight."""

from __future__ import annotations

import importlib.util
import logging
import random
from collections.abc import Callable
from dataclasses import replace
from importlib.machinery import ModuleSpec
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from scrutiny.connectors.zookeeper.client import (
    COMMAND_RETRY,
    CONNECTION_RETRY,
    LOGGER_NAME,
    RetryExhaustedError,
    RetryPolicy,
    ZooKeeperAuth,
    build_zookeeper_client,
    zookeeper_auth,
    zookeeper_logger,
    zookeeper_target,
)
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.core.backoff import Backoff
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret
from scrutiny.core.zk_paths import LedgerManager

PASSWORD = "pw-7c1e-hunter2"
#: kazoo's request tracing level (below DEBUG), at which it would log Auth requests.
BLATHER = 5

RETRYABLE = [ConnectionLoss, OperationTimeoutError, SessionExpiredError, SessionMovedError, KazooTimeoutError]
NOT_RETRYABLE = [NoNodeError, NodeExistsError, NoAuthError, ValueError, KeyError]


class FakeTime:
    """A clock that only moves when slept on; records every sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(errors: list[BaseException], result: str = "done") -> tuple[Callable[[], str], list[int]]:
    """An operation raising ``errors`` in turn, then returning ``result``; and its call counter."""
    calls = [0]

    def operation() -> str:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return result

    return operation, calls


# --------------------------------------------------------------------------- RetryPolicy: delays


def test_delay_grows_by_the_multiplier_up_to_the_maximum_without_jitter() -> None:
    policy = RetryPolicy(backoff=Backoff(initial_s=0.1, maximum_s=1.0, multiplier=2.0, jitter=0.0))
    assert [round(policy.delay(n), 9) for n in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_delay_with_multiplier_one_stays_constant() -> None:
    policy = RetryPolicy(backoff=Backoff(initial_s=0.5, maximum_s=0.5, multiplier=1.0, jitter=0.0))
    assert {policy.delay(n) for n in range(10)} == {0.5}


def test_jitter_stays_within_its_band_and_never_beyond_the_maximum() -> None:
    policy = RetryPolicy(backoff=Backoff(initial_s=0.1, maximum_s=1.0, multiplier=2.0, jitter=0.2))
    rng = random.Random(7)
    for retry in range(8):
        base = min(1.0, 0.1 * 2.0**retry)
        samples = [policy.delay(retry, rng) for _ in range(300)]
        assert all(base * 0.8 - 1e-12 <= s <= min(1.0, base * 1.2) + 1e-12 for s in samples), retry
        assert max(samples) <= 1.0
    low = [policy.delay(0, rng) for _ in range(300)]
    assert min(low) < 0.095 and max(low) > 0.105  # the jitter really spreads the delays


def test_delay_is_reproducible_with_a_seeded_rng() -> None:
    policy = RetryPolicy()
    assert [policy.delay(n, random.Random(3)) for n in range(5)] == [
        policy.delay(n, random.Random(3)) for n in range(5)
    ]


def test_a_huge_retry_number_does_not_overflow() -> None:
    policy = RetryPolicy(backoff=Backoff(initial_s=0.1, maximum_s=10.0, jitter=0.0))
    assert policy.delay(10**6) == 10.0


@pytest.mark.parametrize(
    "arguments",
    [
        {"backoff": Backoff(initial_s=0.0)},
        {"deadline_seconds": 0.0},
        {"deadline_seconds": -5.0},
        {"max_attempts": 0},
    ],
)
def test_nonsensical_policies_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**arguments)


# --------------------------------------------------------------------------- RetryPolicy: which errors, how often


@pytest.mark.parametrize("error", RETRYABLE)
def test_connection_and_session_errors_are_retried(error: type[BaseException]) -> None:
    assert RetryPolicy().is_retryable(error())


@pytest.mark.parametrize("error", NOT_RETRYABLE)
def test_answers_and_programming_errors_are_not_retried(error: type[BaseException]) -> None:
    assert not RetryPolicy().is_retryable(error())


def test_call_retries_until_success_reporting_each_retry_before_its_wait() -> None:
    fake = FakeTime()
    policy = RetryPolicy(backoff=Backoff(initial_s=0.1, maximum_s=1.0, jitter=0.0))
    operation, calls = failing([ConnectionLoss(), SessionExpiredError(), OperationTimeoutError()])
    timeline: list[tuple[str, object, float]] = []

    def sleep(seconds: float) -> None:
        timeline.append(("sleep", None, round(seconds, 9)))
        fake.sleep(seconds)

    def told(attempt: int, error: BaseException, wait: float) -> None:
        timeline.append(("told", (attempt, type(error).__name__), round(wait, 9)))

    result = policy.call(operation, on_retry=told, sleep=sleep, clock=fake.clock)
    assert result == "done" and calls[0] == 4
    assert timeline == [
        ("told", (1, "ConnectionLoss"), 0.1),
        ("sleep", None, 0.1),
        ("told", (2, "SessionExpiredError"), 0.2),
        ("sleep", None, 0.2),
        ("told", (3, "OperationTimeoutError"), 0.4),
        ("sleep", None, 0.4),
    ]


@pytest.mark.parametrize("error", NOT_RETRYABLE)
def test_call_raises_other_errors_at_once(error: type[BaseException]) -> None:
    fake = FakeTime()
    operation, calls = failing([error()])
    with pytest.raises(error):
        RetryPolicy().call(operation, sleep=fake.sleep, clock=fake.clock)
    assert calls[0] == 1 and fake.sleeps == []


def test_call_gives_up_after_max_attempts_with_the_last_error() -> None:
    fake = FakeTime()
    last = ConnectionLoss("third")
    operation, calls = failing([ConnectionLoss("first"), ConnectionLoss("second"), last, ConnectionLoss("never")])
    told: list[int] = []
    policy = RetryPolicy(backoff=Backoff(jitter=0.0), max_attempts=3)
    with pytest.raises(RetryExhaustedError) as raised:
        policy.call(operation, what="get /ledgers/LAYOUT", on_retry=lambda a, e, w: told.append(a), sleep=fake.sleep)
    assert calls[0] == 3 and len(fake.sleeps) == 2 and told == [1, 2]
    assert raised.value.attempts == 3 and raised.value.last_error is last and raised.value.__cause__ is last
    assert "get /ledgers/LAYOUT failed after 3 attempts" in str(raised.value) and "ConnectionLoss" in str(raised.value)


def test_one_attempt_means_no_retry() -> None:
    fake = FakeTime()
    operation, calls = failing([ConnectionLoss()])
    with pytest.raises(RetryExhaustedError):
        RetryPolicy(max_attempts=1).call(operation, sleep=fake.sleep, clock=fake.clock)
    assert calls[0] == 1 and fake.sleeps == []


def test_call_gives_up_before_a_wait_would_pass_the_deadline() -> None:
    fake = FakeTime()
    policy = RetryPolicy(backoff=Backoff(initial_s=1.0, maximum_s=100.0, jitter=0.0), deadline_seconds=10.0)
    operation, calls = failing([ConnectionLoss() for _ in range(50)])
    with pytest.raises(RetryExhaustedError) as raised:
        policy.call(operation, sleep=fake.sleep, clock=fake.clock)
    # Waits 1, 2, 4 (7 s in all); the next wait (8 s) would end at 15 s > 10 s: it stops there.
    assert fake.sleeps == [1.0, 2.0, 4.0] and calls[0] == 4 and raised.value.attempts == 4
    assert sum(fake.sleeps) <= 10.0


def test_without_bounds_call_keeps_retrying() -> None:
    fake = FakeTime()
    operation, calls = failing([ConnectionLoss() for _ in range(200)])
    assert CONNECTION_RETRY.call(operation, sleep=fake.sleep, clock=fake.clock) == "done"
    assert calls[0] == 201 and max(fake.sleeps) <= CONNECTION_RETRY.backoff.maximum_s


def test_the_shipped_policies() -> None:
    assert CONNECTION_RETRY.deadline_seconds is None and CONNECTION_RETRY.max_attempts is None
    assert COMMAND_RETRY.deadline_seconds == 60.0 and COMMAND_RETRY.backoff.maximum_s == 5.0
    assert COMMAND_RETRY.max_attempts is None


def test_kazoo_retry_carries_the_same_policy() -> None:
    policy = RetryPolicy(
        backoff=Backoff(initial_s=0.25, maximum_s=4.0, multiplier=3.0, jitter=0.1), deadline_seconds=30.0
    )
    retry = policy.kazoo_retry()
    assert isinstance(retry, KazooRetry)
    assert (retry.delay, retry.backoff, retry.max_jitter, retry.max_delay, retry.deadline) == (
        0.25,
        3.0,
        0.1,
        4.0,
        30.0,
    )
    assert retry.max_tries == -1  # no attempt limit: kazoo's "forever"
    assert SessionExpiredError in retry.retry_exceptions and ConnectionLoss in retry.retry_exceptions
    assert replace(policy, max_attempts=5).kazoo_retry().max_tries == 5


# --------------------------------------------------------------------------- where the metadata lives


def test_metadata_uri_gives_hosts_root_and_manager_and_wins_over_connect() -> None:
    settings = ZooKeeperSection(
        connect="ignored:2181",
        ledgers_root="/ignored",
        metadata_uri="zk+longhierarchical://zk1:2181;zk2:2182,zk3/pulsar/ledgers",
    )
    target = zookeeper_target(settings)
    assert target.hosts == "zk1:2181,zk2:2182,zk3"
    assert target.ledgers_root == "/pulsar/ledgers"
    assert target.manager is LedgerManager.LONG_HIERARCHICAL


def test_plain_zk_scheme_means_hierarchical() -> None:
    target = zookeeper_target(ZooKeeperSection(metadata_uri="zk://zk1:2181/ledgers/"))
    assert (target.hosts, target.ledgers_root, target.manager) == ("zk1:2181", "/ledgers", LedgerManager.HIERARCHICAL)


@pytest.mark.parametrize(
    "uri", ["http://zk1:2181/ledgers", "zk+hierarchical://zk1:2181", "zk://zk1:99999/ledgers", "zk://u:p@zk1/ledgers"]
)
def test_a_bad_metadata_uri_names_the_key(uri: str) -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.metadata_uri"):
        zookeeper_target(ZooKeeperSection(metadata_uri=uri))


def test_connect_and_ledgers_root_when_there_is_no_uri() -> None:
    settings = ZooKeeperSection(connect="  zk1:2181,zk2:2181/chroot  ", ledgers_root="/bk/ledgers")
    target = zookeeper_target(settings)
    assert target.hosts == "zk1:2181,zk2:2181/chroot"  # kazoo's own hosts string, chroot included
    assert target.ledgers_root == "/bk/ledgers" and target.manager is LedgerManager.HIERARCHICAL
    assert "zk1:2181,zk2:2181/chroot" in target.describe() and "/bk/ledgers" in target.describe()


@pytest.mark.parametrize("connect", ["", "   ", "zk1:2181,,zk2:2181", ",zk1:2181", "zk1:2181, /chroot"])
def test_an_empty_connect_or_host_is_refused(connect: str) -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.connect"):
        zookeeper_target(ZooKeeperSection(connect=connect))


@pytest.mark.parametrize("root", ["ledgers", "/ledgers/", "/a//b", "/a/../b"])
def test_a_bad_ledgers_root_names_the_key(root: str) -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.ledgers_root"):
        zookeeper_target(ZooKeeperSection(connect="zk1:2181", ledgers_root=root))


# --------------------------------------------------------------------------- authentication


def settings_with(scheme: str, credentials: str) -> ZooKeeperSection:
    return ZooKeeperSection(connect="zk1:2181", auth_scheme=scheme, auth_credentials=Secret(credentials))


def test_no_scheme_no_credentials_means_no_auth() -> None:
    auth = zookeeper_auth(ZooKeeperSection())
    assert auth.auth_data == () and auth.sasl_options is None


def test_credentials_without_a_scheme_are_refused_without_showing_them() -> None:
    with pytest.raises(ConfigError, match=r"auth_scheme is empty") as raised:
        zookeeper_auth(settings_with("", f"bob:{PASSWORD}"))
    assert PASSWORD not in str(raised.value)


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'kerberos'"):
        zookeeper_auth(settings_with("kerberos", f"bob:{PASSWORD}"))


@pytest.mark.parametrize("scheme", ["digest", " Digest ", "DIGEST"])
def test_digest_sends_user_and_password_with_add_auth(scheme: str) -> None:
    auth = zookeeper_auth(settings_with(scheme, f"bob:{PASSWORD}"))
    assert auth.auth_data == (("digest", f"bob:{PASSWORD}"),) and auth.sasl_options is None


@pytest.mark.parametrize("scheme", ["digest", "sasl"])
@pytest.mark.parametrize("credentials", ["", "bob", f":{PASSWORD}", "bob:", PASSWORD])
def test_credentials_must_be_user_colon_password(scheme: str, credentials: str) -> None:
    with pytest.raises(ConfigError, match=r"user:password") as raised:
        zookeeper_auth(settings_with(scheme, credentials))
    assert PASSWORD not in str(raised.value)


def test_sasl_uses_digest_md5_with_the_whole_password() -> None:
    auth = zookeeper_auth(settings_with("sasl", f"bob:{PASSWORD}:with:colons"))
    assert auth.auth_data == ()
    assert auth.sasl_options == {"mechanism": "DIGEST-MD5", "username": "bob", "password": f"{PASSWORD}:with:colons"}


def test_sasl_without_pure_sasl_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_puresasl(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "puresasl" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_puresasl)
    with pytest.raises(ConfigError, match=r"pure-sasl") as raised:
        zookeeper_auth(settings_with("sasl", f"bob:{PASSWORD}"))
    assert PASSWORD not in str(raised.value)
    assert zookeeper_auth(settings_with("digest", f"bob:{PASSWORD}")).auth_data  # digest does not need it


@pytest.mark.parametrize("scheme", ["digest", "sasl"])
def test_auth_repr_shows_the_scheme_never_the_credentials(scheme: str) -> None:
    auth = zookeeper_auth(settings_with(scheme, f"bob:{PASSWORD}"))
    for text in (repr(auth), str(auth), f"{auth}", f"{auth!r}"):
        assert PASSWORD not in text and "bob" not in text
    assert ("digest" in repr(auth)) == (scheme == "digest") and ("DIGEST-MD5" in repr(auth)) == (scheme == "sasl")
    assert repr(ZooKeeperAuth()) == "ZooKeeperAuth(schemes=[], sasl=None)"


# --------------------------------------------------------------------------- the client and its logs


def test_client_is_built_configured_and_not_started() -> None:
    settings = replace(settings_with("digest", f"bob:{PASSWORD}"), session_timeout_seconds=12)
    client = build_zookeeper_client(settings, command_retry=RetryPolicy(deadline_seconds=7.0))
    assert isinstance(client, KazooClient)
    assert client.hosts == [("zk1", 2181)] and not client.chroot
    assert client._session_timeout == 12_000
    assert client.auth_data == {("digest", f"bob:{PASSWORD}")}
    assert client._connection.sasl_options is None
    assert client._retry.deadline == 7.0 and client._conn_retry.max_tries == -1
    assert client.logger is zookeeper_logger()
    assert not client.connected and client._stopped.is_set()  # nothing started, no connection attempt


def test_client_hosts_override_and_class() -> None:
    settings = ZooKeeperSection(metadata_uri="zk://zk1:2181;zk2:2181/ledgers")
    client = build_zookeeper_client(settings, hosts="127.0.0.1:2999/test-root", client_class=PersistentWatchClient)
    assert isinstance(client, PersistentWatchClient)
    assert client.hosts == [("127.0.0.1", 2999)] and client.chroot == "/test-root"
    default = build_zookeeper_client(settings)
    assert default.hosts == [("zk1", 2181), ("zk2", 2181)]


def test_sasl_client_gets_sasl_options_and_no_auth_data() -> None:
    client = build_zookeeper_client(settings_with("sasl", f"bob:{PASSWORD}"))
    assert client.auth_data == set()
    assert client._connection.sasl_options == {"mechanism": "DIGEST-MD5", "username": "bob", "password": PASSWORD}


def test_bad_auth_settings_fail_before_any_client_exists() -> None:
    with pytest.raises(ConfigError):
        build_zookeeper_client(settings_with("digest", "no-colon"))


def test_logger_drops_kazoo_request_tracing_and_keeps_debug(caplog: pytest.LogCaptureFixture) -> None:
    logger = zookeeper_logger()
    assert logger.name == LOGGER_NAME and zookeeper_logger() is logger
    assert len(logger.filters) == len(zookeeper_logger().filters)  # the filter is added once
    caplog.set_level(1, logger=LOGGER_NAME)
    logger.log(BLATHER, "Sending request(xid=%s): Auth(auth_type=0, scheme='digest', auth=%r)", 1, f"bob:{PASSWORD}")
    logger.debug("Received response(xid=%s): %r", 1, True)
    logger.warning("Connection dropped: %s", "socket connection broken")
    assert [r.levelno for r in caplog.records if r.name == LOGGER_NAME] == [logging.DEBUG, logging.WARNING]
    assert PASSWORD not in caplog.text


def test_building_clients_logs_no_credentials(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(1)
    for scheme in ("digest", "sasl"):
        build_zookeeper_client(settings_with(scheme, f"bob:{PASSWORD}"))
    assert PASSWORD not in caplog.text
