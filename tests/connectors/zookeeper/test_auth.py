"""ZooKeeper authentication through the settings: digest and SASL DIGEST-MD5 against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.security import ACL, make_acl, make_digest_acl

from scrutiny.connectors.zookeeper.client import build_zookeeper_client
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret
from scrutiny.services.servers import start_zookeeper

pytestmark = pytest.mark.integration


@contextmanager
def user_and_anonymous(server_address: str, user: ZooKeeperSection) -> Iterator[tuple[KazooClient, KazooClient]]:
    """A client with ``user``'s login and an anonymous one, both started; stopped and closed on exit."""
    clients = (build_zookeeper_client(user), build_zookeeper_client(ZooKeeperSection(connect=server_address)))
    try:
        for client in clients:
            client.start(timeout=15)
        yield clients
    finally:
        for client in clients:
            client.stop()
            client.close()


def assert_only_the_user_reads(server_address: str, scheme: str, credentials: str, acl: ACL) -> None:
    """A client logged in with ``credentials`` creates a node only it may read; an anonymous one is refused."""
    login = ZooKeeperSection(connect=server_address, auth_scheme=scheme, auth_credentials=Secret(credentials))
    with user_and_anonymous(server_address, login) as (user, anonymous):
        user.create("/private", b"ledger metadata", acl=[acl])
        assert user.get("/private")[0] == b"ledger metadata"
        with pytest.raises(NoAuthError):
            anonymous.get("/private")


def test_sasl_digest_md5_login_reaches_sasl_protected_nodes(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", sasl_users={"bob": "s3cret"}, die_with_parent=True) as server:
        assert_only_the_user_reads(server.address, "sasl", "bob:s3cret", make_acl("sasl", "bob", all=True))


def test_wrong_sasl_password_does_not_connect(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", sasl_users={"bob": "s3cret"}, die_with_parent=True) as server:
        settings = ZooKeeperSection(connect=server.address, auth_scheme="sasl", auth_credentials=Secret("bob:wrong"))
        client = build_zookeeper_client(settings)
        try:
            with pytest.raises(AuthFailedError):  # the server refused the login: not a timeout, not a bad option
                client.start(timeout=5)
                client.get("/")
        finally:
            client.stop()
            client.close()


def test_digest_auth_reaches_digest_protected_nodes(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", die_with_parent=True) as server:
        assert_only_the_user_reads(server.address, "digest", "ops:pw1", make_digest_acl("ops", "pw1", all=True))


def test_with_enable_security_the_nodes_created_are_the_creators_alone(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", die_with_parent=True) as server:
        secure = ZooKeeperSection(
            connect=server.address, auth_scheme="digest", auth_credentials=Secret("ops:pw1"), enable_security=True
        )
        with user_and_anonymous(server.address, secure) as (owner, anonymous):
            owner.create("/ledgers/underreplication/ledgers/0000/0000/0000/urL0000000001", b"mark", makepath=True)
            acls, _ = owner.get_acls("/ledgers/underreplication")  # the parents too
            assert acls == [make_digest_acl("ops", "pw1", all=True)]
            with pytest.raises(NoAuthError):
                anonymous.delete("/ledgers/underreplication/ledgers/0000/0000/0000/urL0000000001")
    with pytest.raises(ConfigError, match=r"enable_security needs zookeeper\.auth_scheme"):
        ZooKeeperSection(enable_security=True)
