"""Kafka client arguments built from the ``[kafka]`` settings, validated before any connection: kafka-python's
keyword arguments, librdkafka's configuration (the watcher's producer) and Java client properties (Spark's source).

The same settings reach the embedded broker and a production Kafka cluster: bootstrap servers,
``security_protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), SASL PLAIN / SCRAM credentials
and a CA file. Bad combinations raise :class:`ConfigError` naming the keys (a SASL mechanism
without credentials, credentials that a non-SASL protocol would silently ignore, a CA file
without SSL, ...). The SASL password is revealed only into the returned arguments; the
:class:`KafkaClientConfig` repr hides it.

The settings arrive as any object with the ``[kafka]`` section's attributes (this layer does not
import the settings module).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.core.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_MAX_PORT = 65535


@dataclass(frozen=True, slots=True)
class KafkaClientConfig:
    """Validated connection settings; ``kwargs()`` gives kafka-python's arguments."""

    bootstrap_servers: tuple[str, ...]
    security_protocol: str
    sasl_mechanism: str | None
    sasl_username: str | None
    sasl_password: str | None
    ssl_cafile: str | None

    def __repr__(self) -> str:
        password = "'***'" if self.sasl_password else "None"
        return (
            f"KafkaClientConfig(bootstrap_servers={list(self.bootstrap_servers)}, "
            f"security_protocol={self.security_protocol!r}, sasl_mechanism={self.sasl_mechanism!r}, "
            f"sasl_username={self.sasl_username!r}, sasl_password={password}, ssl_cafile={self.ssl_cafile!r})"
        )

    def kwargs(self, client_id: str) -> dict[str, object]:
        """Connection arguments shared by KafkaProducer, KafkaConsumer and KafkaAdminClient."""
        arguments: dict[str, object] = {
            "bootstrap_servers": list(self.bootstrap_servers),
            "security_protocol": self.security_protocol,
            "client_id": client_id,
        }
        if self.sasl_mechanism is not None:
            arguments["sasl_mechanism"] = self.sasl_mechanism
            arguments["sasl_plain_username"] = self.sasl_username
            arguments["sasl_plain_password"] = self.sasl_password
        if self.ssl_cafile is not None:
            arguments["ssl_cafile"] = self.ssl_cafile
        return arguments

    def java_properties(self) -> dict[str, str]:
        """The same connection as Apache Kafka's Java client properties (for Spark's Kafka source).

        SASL PLAIN and SCRAM logins become ``sasl.jaas.config`` (the password revealed into it: Spark redacts
        ``sasl.jaas.config`` in plans and its UI); the CA file is a PEM trust store.
        """
        properties = {
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism is not None:
            module = _JAAS_MODULES["PLAIN" if self.sasl_mechanism == "PLAIN" else "SCRAM"]
            username, password = _jaas_quoted(self.sasl_username or ""), _jaas_quoted(self.sasl_password or "")
            properties["sasl.mechanism"] = self.sasl_mechanism
            properties["sasl.jaas.config"] = f'{module} required username="{username}" password="{password}";'
        if self.ssl_cafile is not None:
            properties["ssl.truststore.type"] = "PEM"
            properties["ssl.truststore.location"] = self.ssl_cafile
        return properties


#: The JAAS login module of each SASL mechanism family in Kafka's Java client.
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quoted(value: str) -> str:
    """A value inside a JAAS option's double quotes: backslashes and quotes escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def kafka_client_config(settings: KafkaSection) -> KafkaClientConfig:
    """Validate the ``[kafka]`` connection keys; ConfigError naming the key on any problem."""
    servers = parse_bootstrap_servers(settings.bootstrap_servers)
    protocol = settings.security_protocol.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        known = ", ".join(SECURITY_PROTOCOLS)
        raise ConfigError(f"kafka.security_protocol must be one of {known}, not {settings.security_protocol!r}")
    mechanism, username, password = _sasl(settings, protocol)
    cafile = settings.ssl_cafile.strip() or None
    if cafile is not None:
        if "SSL" not in protocol:
            raise ConfigError(
                f"kafka.ssl_cafile is set but kafka.security_protocol is {protocol} (use SSL or SASL_SSL)"
            )
        if not Path(cafile).is_file():
            raise ConfigError(f"kafka.ssl_cafile {cafile} is not a readable file")
    return KafkaClientConfig(servers, protocol, mechanism, username, password, cafile)


def _sasl(settings: KafkaSection, protocol: str) -> tuple[str | None, str | None, str | None]:
    mechanism = settings.sasl_mechanism.strip().upper()
    username = settings.sasl_username
    password = settings.sasl_password.reveal()
    if not protocol.startswith("SASL_"):
        given = [
            key
            for key, value in (("sasl_mechanism", mechanism), ("sasl_username", username), ("sasl_password", password))
            if value
        ]
        if given:
            keys = ", ".join(f"kafka.{key}" for key in given)
            raise ConfigError(
                f"{keys} set but kafka.security_protocol is {protocol}: use SASL_PLAINTEXT or SASL_SSL, "
                "or remove the SASL keys"
            )
        return None, None, None
    if not mechanism:
        raise ConfigError(
            f"kafka.security_protocol {protocol} needs kafka.sasl_mechanism ({', '.join(SASL_MECHANISMS)})"
        )
    if mechanism not in SASL_MECHANISMS:
        known = ", ".join(SASL_MECHANISMS)
        raise ConfigError(f"kafka.sasl_mechanism must be one of {known}, not {settings.sasl_mechanism!r}")
    if not username or not password:
        raise ConfigError(f"kafka.sasl_mechanism {mechanism} needs both kafka.sasl_username and kafka.sasl_password")
    return mechanism, username, password


def parse_bootstrap_servers(text: str) -> tuple[str, ...]:
    """``host:port[,host:port...]`` as a tuple; ConfigError on an empty list, a missing or bad port."""
    servers = tuple(part.strip() for part in text.split(","))
    if not text.strip() or any(not server for server in servers):
        raise ConfigError(f"kafka.bootstrap_servers must be host:port[,host:port...], not {text!r}")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= _MAX_PORT:
            raise ConfigError(f"kafka.bootstrap_servers entry {server!r} is not host:port")
    return servers


def producer_kwargs(settings: KafkaSection, client_id: str = "scrutiny-producer") -> dict[str, object]:
    """KafkaProducer arguments: the connection, and ``acks='all'`` (every in-sync replica)."""
    return kafka_client_config(settings).kwargs(client_id) | {"acks": "all"}


def consumer_kwargs(settings: KafkaSection, client_id: str = "scrutiny-consumer") -> dict[str, object]:
    """KafkaConsumer arguments: the connection (group, offsets and deserialisers are the caller's)."""
    return kafka_client_config(settings).kwargs(client_id)


def admin_kwargs(settings: KafkaSection, client_id: str = "scrutiny-admin") -> dict[str, object]:
    """KafkaAdminClient arguments: the connection."""
    return kafka_client_config(settings).kwargs(client_id)


#: kafka-python's connection arguments (as :meth:`KafkaClientConfig.kwargs` gives them) and librdkafka's names.
_LIBRDKAFKA_NAMES = {
    "bootstrap_servers": "bootstrap.servers",
    "client_id": "client.id",
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
}


def librdkafka_config(options: Mapping[str, object]) -> dict[str, str]:
    """The connection arguments of kafka-python (:meth:`KafkaClientConfig.kwargs`) as librdkafka's configuration
    (confluent-kafka's producer and admin client); ConfigError naming any argument that is not a connection's."""
    unknown = sorted(set(options) - set(_LIBRDKAFKA_NAMES))
    if unknown:
        raise ConfigError(f"not a Kafka connection argument: {', '.join(unknown)}")
    return {
        _LIBRDKAFKA_NAMES[name]: ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        for name, value in options.items()
        if value is not None
    }
