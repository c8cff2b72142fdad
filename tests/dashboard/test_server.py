"""The dashboard's HTTP side: which addresses are loopback, and the token guard and headers (Flask's test client).

The guard is checked on an app over an empty directory: none of the requests it answers reads a table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scrutiny.dashboard.app import create_app
from scrutiny.dashboard.server import TOKEN_COOKIE, is_loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        *[("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True)],
        *[("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("dashboard.example", False), ("", False)],
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_a_token_only_requests_to_a_loopback_name_are_answered(tmp_path: Path) -> None:
    client = create_app(tmp_path).server.test_client()
    for host in ("127.0.0.1:8050", "localhost:8050", "[::1]:8050", "127.0.0.2", "localhost"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("rebind.example:8050", "127.0.0.1.rebind.example", "192.168.1.10:8050"):  # DNS rebinding
        response = client.get("/_dash-layout", headers={"Host": host})
        assert response.status_code == 421 and b"loopback" in response.data, host


def test_behind_a_trusted_tls_proxy_the_token_cookie_is_secure(tmp_path: Path) -> None:
    forwarded = {"X-Forwarded-Proto": "https"}
    trusting = create_app(tmp_path, token="t0ken", trust_proxy=True).server.test_client()
    assert "; Secure" in trusting.get("/?token=t0ken", headers=forwarded).headers["Set-Cookie"]
    direct = create_app(tmp_path, token="t0ken").server.test_client()  # a client's own header is not believed
    assert "; Secure" not in direct.get("/?token=t0ken", headers=forwarded).headers["Set-Cookie"]


def test_the_token_guard_answers_401_unless_the_token_is_presented(tmp_path: Path) -> None:
    client = create_app(tmp_path, token="s3cret-token").server.test_client()
    for path in ("/", "/_dash-layout", "/_dash-dependencies", "/_favicon.ico"):
        assert client.get(path).status_code == 401, path
    assert client.get("/?token=wrong").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    response = client.get("/?token=s3cret-token")
    assert response.status_code == 200
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}=s3cret-token") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert client.get("/_dash-layout").status_code == 200  # the cookie now carries the token
    client.delete_cookie(TOKEN_COOKIE)
    assert client.get("/_dash-layout").status_code == 401
