"""The pure parts of the listing fetcher: configuration, secret hiding, protocol choice and routes, grouping."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from scrutiny.connectors.bookies.fetch import (
    FetchConfig,
    FetchConfigError,
    FrozenMap,
    choose_protocol,
    fetch_config_from_settings,
    group_by_bookie,
    parse_bookie_map,
    plan_route,
)
from scrutiny.connectors.bookies.settings import BookiesSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret
from scrutiny.core.zk_records import BookieServiceInfo, Endpoint, format_bookie_service_info

TOKEN = "s3cr3t-t0ken-value"


def registration(v3: tuple[str, int] | None = ("10.0.0.1", 3181), agent: tuple[str, int] | None = None) -> bytes:
    endpoints = []
    if v3 is not None:
        endpoints.append(Endpoint(id="bookie", host=v3[0], port=v3[1], protocol="bookie-rpc"))
    if agent is not None:
        endpoints.append(Endpoint(id="scrutiny-agent", host=agent[0], port=agent[1], protocol="scrutiny-agent"))
    return format_bookie_service_info(BookieServiceInfo(endpoints=tuple(endpoints)))


# --------------------------------------------------------------------------- configuration


def test_defaults_are_valid_and_documented_values() -> None:
    config = FetchConfig()
    assert config.protocol == "auto"
    assert config.request_timeout_s == 5.0
    assert config.max_ledgers_per_call == 500
    assert config.max_in_flight_per_bookie == 1000
    assert config.agent_calls_in_flight == 2


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"protocol": "grpc"}, "protocol"),
        ({"protocols": {"bk1": "auto"}}, "protocols['bk1']"),
        ({"v3_overrides": {"bk1": "no-port"}}, "v3_overrides['bk1']"),
        ({"agent_overrides": {"bk1": "host:99999"}}, "agent_overrides['bk1']"),
        ({"request_timeout_s": 0}, "request_timeout_s"),
        ({"connect_timeout_s": -1.0}, "connect_timeout_s"),
        ({"request_timeout_s": float("nan")}, "request_timeout_s"),
        ({"max_ledgers_per_call": 0}, "max_ledgers_per_call"),
        ({"max_in_flight_per_bookie": True}, "max_in_flight_per_bookie"),
        ({"agent_ca_file": "/ca.pem"}, "agent_ca_file"),
        ({"v3_ca_file": "/ca.pem"}, "v3_ca_file"),
    ],
)
def test_bad_configuration_names_the_field(kwargs: dict[str, object], names: str) -> None:
    with pytest.raises(FetchConfigError) as caught:
        FetchConfig(**kwargs)  # type: ignore[arg-type]
    assert names in str(caught.value)


def test_ipv6_override_is_accepted() -> None:
    config = FetchConfig(v3_overrides={"bk1": "[::1]:3181"})
    route = plan_route("bk1", None, config)
    assert route.address == ("::1", 3181)
    assert route.target == "[::1]:3181"


def test_token_never_in_repr_or_str() -> None:
    config = FetchConfig(token=Secret(TOKEN), protocol="agent")
    assert TOKEN not in repr(config)
    assert TOKEN not in str(config)
    assert config.token.reveal() == TOKEN


def test_config_is_picklable_hashable_and_immutable() -> None:
    config = FetchConfig(
        v3_overrides={"bk1": "h1:3181"}, protocols={"bk2": "agent"}, token=Secret(TOKEN), agent_tls=True
    )
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config
    assert hash(copy) == hash(config)
    assert copy.v3_overrides["bk1"] == "h1:3181"
    assert isinstance(config.v3_overrides, FrozenMap)
    with pytest.raises(TypeError):
        config.v3_overrides["bk3"] = "x:1"  # type: ignore[index]
    same = FetchConfig(v3_overrides={"bk1": "h1:3181"}, protocols={"bk2": "agent"}, token=Secret(TOKEN), agent_tls=True)
    assert {config: 1}[same] == 1
    assert FetchConfig(token=Secret("other")) != FetchConfig(token=Secret(TOKEN))


def test_parse_bookie_map() -> None:
    assert parse_bookie_map(" bk1 = h1:3181 ,bk2=h2:3181,, ", what="x") == {"bk1": "h1:3181", "bk2": "h2:3181"}
    assert parse_bookie_map("", what="x") == {}
    for bad in ("bk1", "=h:1", "bk1=", "bk1=a:1,bk1=b:1"):
        with pytest.raises(FetchConfigError, match=r"bookies\.v3_overrides"):
            parse_bookie_map(bad, what="bookies.v3_overrides")


def test_config_from_settings_section() -> None:
    assert fetch_config_from_settings(BookiesSection()) == FetchConfig()
    section = BookiesSection(
        protocol="v3", protocols="bk1=agent", agent_overrides="bk1=a:3185", agent_token=Secret(TOKEN), agent_tls=True
    )
    config = fetch_config_from_settings(section)
    assert config.protocols == {"bk1": "agent"} and config.agent_overrides == {"bk1": "a:3185"}
    assert config.token.reveal() == TOKEN and config.agent_tls
    with pytest.raises(ConfigError, match=r"^bookies\.request_timeout_seconds must be a positive"):
        replace(section, request_timeout_seconds=0.0)  # the section refuses it when built
    for bad, key in [
        (replace(section, v3_overrides="bk2=nowhere"), "bookies.v3_overrides['bk2']"),
        (replace(section, protocols="bk2"), "bookies.protocols"),
    ]:
        with pytest.raises(FetchConfigError) as caught:
            fetch_config_from_settings(bad)
        assert str(caught.value).startswith(key) and TOKEN not in str(caught.value)


# --------------------------------------------------------------------------- protocol choice and routes


def test_auto_picks_the_agent_when_the_registration_advertises_one() -> None:
    config = FetchConfig()
    route = plan_route("bk1", registration(agent=("10.0.0.1", 3185)), config)
    assert (route.protocol, route.address) == ("agent", ("10.0.0.1", 3185))


def test_the_token_goes_in_clear_text_only_to_configured_or_loopback_agents() -> None:
    token = FetchConfig(token=Secret("s3cret"))
    route = plan_route("bk1", registration(agent=("10.0.0.1", 3185)), token)
    assert route.address is None and route.problem is not None
    assert (
        "not sending the agent token in clear text to 10.0.0.1:3185" in route.problem and "s3cret" not in route.problem
    )
    assert plan_route("bk1", registration(agent=("agent.example", 3185)), token).address is None  # a name: anywhere
    assert plan_route("bk1", registration(agent=("127.0.0.1", 3185)), token).address == ("127.0.0.1", 3185)
    assert plan_route("bk1", registration(agent=("10.0.0.1", 3185)), replace(token, agent_tls=True)).address
    configured = replace(token, agent_overrides={"bk1": "10.0.0.9:3185"})  # the operator chose it
    assert plan_route("bk1", registration(agent=("10.0.0.1", 3185)), configured).address == ("10.0.0.9", 3185)


def test_auto_picks_v3_without_agent_endpoint() -> None:
    route = plan_route("bk1", registration(), FetchConfig())
    assert (route.protocol, route.address) == ("v3", ("10.0.0.1", 3181))


def test_auto_picks_the_agent_for_an_agent_override_even_without_registration() -> None:
    config = FetchConfig(agent_overrides={"bk1": "agent-host:3185"})
    route = plan_route("bk1", None, config)
    assert (route.protocol, route.address) == ("agent", ("agent-host", 3185))
    assert choose_protocol("bk2", None, config) == "v3"


def test_per_bookie_protocol_beats_the_global_one() -> None:
    data = registration(agent=("10.0.0.1", 3185))
    config = FetchConfig(protocol="agent", protocols={"bk1": "v3"})
    assert plan_route("bk1", data, config).protocol == "v3"
    assert plan_route("bk2", data, config).protocol == "agent"
    auto = FetchConfig(protocols={"bk1": "v3"})
    assert plan_route("bk1", data, auto).address == ("10.0.0.1", 3181)


def test_forced_agent_without_address_is_a_problem_not_an_error() -> None:
    route = plan_route("bk1", registration(), FetchConfig(protocol="agent"))
    assert route.protocol == "agent"
    assert route.address is None
    assert "no agent address" in route.problem and "scrutiny-agent" in route.problem
    unregistered = plan_route("bk1", None, FetchConfig(protocol="agent"))
    assert "not registered" in unregistered.problem


def test_v3_resolution_order_override_registration_id() -> None:
    config = FetchConfig(protocol="v3", v3_overrides={"bk1": "override:1"})
    assert plan_route("bk1", registration(), config).address == ("override", 1)
    assert plan_route("bk2", registration(), config).address == ("10.0.0.1", 3181)
    assert plan_route("legacy-host:3181", b"", config).address == ("legacy-host", 3181)
    assert plan_route("legacy-host:3181", b"\xff\xfe garbage", config).address == ("legacy-host", 3181)
    unresolvable = plan_route("bk3", None, config)
    assert unresolvable.address is None and "bk3" in unresolvable.problem


def test_garbage_registration_never_picks_the_agent() -> None:
    assert choose_protocol("bk1", None, FetchConfig()) == "v3"
    route = plan_route("bk1", b"\x0a\xff\xff", FetchConfig())
    assert route.protocol == "v3" and route.address is None


def test_group_by_bookie_dedupes_and_drops_invalid_ids() -> None:
    wanted = {1: ["a", "b", "a"], 2: ("b",), -1: ("a",), 2**63: ("a",), 3: ()}
    assert group_by_bookie(wanted) == {"a": [1], "b": [1, 2]}
