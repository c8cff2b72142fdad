"""ZooKeeper authentication through the settings: digest and SASL DIGEST-MD5 against a real server."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl, make_digest_acl

from scrutiny.connectors.services import start_zookeeper
from scrutiny.connectors.zookeeper_client import build_zookeeper_client
from scrutiny.core.secret import Secret
from scrutiny.streaming.settings import ZooKeeperSection

pytestmark = pytest.mark.integration


def test_sasl_digest_md5_login_reaches_sasl_protected_nodes(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", sasl_users={"bob": "s3cret"}, die_with_parent=True) as server:
        settings = ZooKeeperSection(connect=server.address, auth_scheme="sasl", auth_credentials=Secret("bob:s3cret"))
        bob = build_zookeeper_client(settings)
        bob.start(timeout=15)
        anonymous = build_zookeeper_client(ZooKeeperSection(connect=server.address))
        anonymous.start(timeout=15)
        try:
            bob.create("/private", b"ledger metadata", acl=[make_acl("sasl", "bob", all=True)])
            assert bob.get("/private")[0] == b"ledger metadata"
            with pytest.raises(NoAuthError):
                anonymous.get("/private")
        finally:
            for client in (bob, anonymous):
                client.stop()
                client.close()


def test_wrong_sasl_password_does_not_connect(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", sasl_users={"bob": "s3cret"}, die_with_parent=True) as server:
        settings = ZooKeeperSection(connect=server.address, auth_scheme="sasl", auth_credentials=Secret("bob:wrong"))
        client = build_zookeeper_client(settings)
        try:
            with pytest.raises(Exception):  # noqa: B017 - kazoo reports a failed SASL login in several ways
                client.start(timeout=5)
                client.get("/")
        finally:
            client.stop()
            client.close()


def test_digest_auth_reaches_digest_protected_nodes(tmp_path: Path) -> None:
    with start_zookeeper(tmp_path / "zk", die_with_parent=True) as server:
        settings = ZooKeeperSection(connect=server.address, auth_scheme="digest", auth_credentials=Secret("ops:pw1"))
        ops = build_zookeeper_client(settings)
        ops.start(timeout=15)
        anonymous = build_zookeeper_client(ZooKeeperSection(connect=server.address))
        anonymous.start(timeout=15)
        try:
            ops.create("/private", b"x", acl=[make_digest_acl("ops", "pw1", all=True)])
            assert ops.get("/private")[0] == b"x"
            with pytest.raises(NoAuthError):
                anonymous.get("/private")
        finally:
            for client in (ops, anonymous):
                client.stop()
                client.close()
