"""SASL settings of the broker, with Kafka's names (`sasl.*`, `listener.name.<l>.*`).

Per SASL listener (SASL_PLAINTEXT or SASL_SSL), each value read from `listener.name.<l>.<x>`
over `<x>`, as Kafka's valuesWithPrefixOverride:

- `sasl.enabled.mechanisms`: Kafka's default is GSSAPI, which kbroker does not implement, so a
  SASL listener must name PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512;
- `listener.name.<l>.<mechanism>.sasl.jaas.config` (the mechanism in lower case): for PLAIN,
  `PlainLoginModule required user_<name>="<password>" ...;` lists the users; its `username` /
  `password` (for any mechanism) are what this broker logs in with on the inter-broker listener;
- `connections.max.reauth.ms` (also per listener and per listener and mechanism): the longest
  session before a client must re-authenticate (KIP-368); 0, the default, for no limit;
- `sasl.server.max.receive.size`: the largest frame accepted before authentication (512 KiB).

Between brokers: `sasl.mechanism.inter.broker.protocol` (Kafka's default GSSAPI again) when the
inter-broker listener is SASL; the credentials come from that listener's JAAS entry for the
mechanism, or else from a `sasl.jaas.config` without prefix (kbroker also reads it there; Kafka
ignores it on a broker).

Every other `sasl.*` setting (Kerberos, OAUTHBEARER, login and callback handler classes, ...)
stops the start: it would be ignored, and the operator relies on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kbroker.security import jaas
from kbroker.security.scram import MECHANISMS as SCRAM_MECHANISMS

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
KAFKA_DEFAULT_MECHANISM = "GSSAPI"  # Kafka's default of sasl.enabled.mechanisms and of the inter-broker one
DEFAULT_MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
LOGIN_MODULES = {PLAIN: jaas.PLAIN_LOGIN_MODULE, **{m: jaas.SCRAM_LOGIN_MODULE for m in SCRAM_MECHANISMS}}

# Settings read here, by name after the listener prefix (if any).
GLOBAL_SETTINGS = frozenset({"sasl.enabled.mechanisms", "sasl.server.max.receive.size", "sasl.jaas.config",
                             "sasl.mechanism.inter.broker.protocol", "connections.max.reauth.ms"})
LISTENER_SETTINGS = frozenset({"sasl.enabled.mechanisms", "sasl.server.max.receive.size", "connections.max.reauth.ms"})
_MECHANISM_SETTING = re.compile(r"([a-z0-9-]+)\.(sasl\.jaas\.config|connections\.max\.reauth\.ms)")
_LISTENER_PREFIX = re.compile(r"listener\.name\.([^.]+)\.(.*)", re.DOTALL)


class SaslConfigError(ValueError):
    """SASL settings that cannot be applied as given: the broker does not start."""


def is_sasl_setting(name: str) -> bool:
    """Whether `name` (with or without a listener prefix) is one of SASL's settings."""
    match = _LISTENER_PREFIX.fullmatch(name)
    base = match.group(2) if match else name
    return base.startswith("sasl.") or base == "connections.max.reauth.ms" \
        or (match is not None and _MECHANISM_SETTING.fullmatch(base) is not None)


def is_honoured(name: str) -> bool:
    """Whether kbroker applies SASL setting `name`; the others stop the start."""
    match = _LISTENER_PREFIX.fullmatch(name)
    if match is None:
        return name in GLOBAL_SETTINGS
    base = match.group(2)
    mechanism_setting = _MECHANISM_SETTING.fullmatch(base)
    if mechanism_setting is not None:
        return mechanism_setting.group(1).upper() in SUPPORTED_MECHANISMS
    return base in LISTENER_SETTINGS


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What a client (another broker, a tool) logs in with."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class SaslListenerSettings:
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(repr=False)  # PLAIN: user -> password, from the JAAS entry
    reauth_ms: Mapping[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms (0: none)
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE
    logins: Mapping[str, SaslCredentials] = field(default_factory=dict, repr=False)  # mechanism -> its JAAS login


def _value(props: Mapping[str, str], listener: str, name: str) -> str | None:
    """`listener.name.<listener>.<name>` (the listener in any case) over `<name>`."""
    for key, value in props.items():
        match = _LISTENER_PREFIX.fullmatch(key)
        if match and match.group(1).upper() == listener.upper() and match.group(2) == name:
            return value
    return props.get(name)


def _listener_value(props: Mapping[str, str], listener: str, name: str) -> str | None:
    """Only `listener.name.<listener>.<name>`: Kafka reads a mechanism's JAAS entry there alone."""
    for key, value in props.items():
        match = _LISTENER_PREFIX.fullmatch(key)
        if match and match.group(1).upper() == listener.upper() and match.group(2) == name:
            return value
    return None


def _int(text: str, name: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SaslConfigError(f"invalid value {text!r} for {name}") from None
    if value < minimum:
        raise SaslConfigError(f"{name} must be at least {minimum}")
    return value


def _login_module(text: str, mechanism: str, where: str) -> jaas.LoginModule:
    try:
        module = jaas.parse_login_module(text)
    except jaas.JaasError as e:
        raise SaslConfigError(f"{where}: {e}") from None
    expected = LOGIN_MODULES[mechanism]
    if module.class_name != expected:
        raise SaslConfigError(f"{where}: login module {module.class_name} is not implemented by kbroker; "
                              f"{mechanism} takes {expected}")
    return module


def listener_settings(props: Mapping[str, str], listener: str) -> SaslListenerSettings:
    """The SASL settings of SASL listener `listener`, checked."""
    text = _value(props, listener, "sasl.enabled.mechanisms")
    mechanisms = tuple(m.strip() for m in (text if text is not None else KAFKA_DEFAULT_MECHANISM).split(",")
                       if m.strip())
    if not mechanisms:
        raise SaslConfigError(f"listener {listener}: sasl.enabled.mechanisms is empty")
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        default = " (Kafka's default of sasl.enabled.mechanisms)" if text is None else ""
        raise SaslConfigError(
            f"listener {listener} enables SASL mechanism {', '.join(unsupported)}{default}, which kbroker does "
            f"not implement; set sasl.enabled.mechanisms to some of {', '.join(SUPPORTED_MECHANISMS)}")
    plain_users: dict[str, str] = {}
    logins: dict[str, SaslCredentials] = {}
    reauth: dict[str, int] = {}
    for mechanism in mechanisms:
        name = f"{mechanism.lower()}.sasl.jaas.config"
        entry = _listener_value(props, listener, name)
        if entry is None and mechanism == PLAIN:
            raise SaslConfigError(f"listener {listener} enables PLAIN but has no listener.name.{listener.lower()}."
                                  f"{name} naming its users (user_<name>=\"<password>\")")
        if entry is not None:
            module = _login_module(entry, mechanism, f"listener.name.{listener.lower()}.{name}")
            if mechanism == PLAIN:
                plain_users = {k[len("user_"):]: v for k, v in module.options.items() if k.startswith("user_")}
            if "username" in module.options and "password" in module.options:
                logins[mechanism] = SaslCredentials(mechanism, module.options["username"], module.options["password"])
        limit = _listener_value(props, listener, f"{mechanism.lower()}.connections.max.reauth.ms")
        limit = limit if limit is not None else _value(props, listener, "connections.max.reauth.ms")
        reauth[mechanism] = _int(limit, "connections.max.reauth.ms", 0) if limit is not None else 0
    size = _value(props, listener, "sasl.server.max.receive.size")
    max_receive = _int(size, "sasl.server.max.receive.size", 1) if size is not None else DEFAULT_MAX_RECEIVE_SIZE
    return SaslListenerSettings(mechanisms, plain_users, reauth, max_receive, logins)


def inter_broker_credentials(props: Mapping[str, str], listener: str,
                             settings: SaslListenerSettings) -> SaslCredentials:
    """What this broker logs in with on the SASL inter-broker listener `listener`."""
    mechanism = (props.get("sasl.mechanism.inter.broker.protocol") or KAFKA_DEFAULT_MECHANISM).strip()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise SaslConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not implemented by kbroker "
                              f"(set it to one of {', '.join(SUPPORTED_MECHANISMS)})")
    if mechanism not in settings.mechanisms:
        raise SaslConfigError(f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms "
                              f"when SASL is used for inter-broker communication ({mechanism} is not enabled on "
                              f"listener {listener})")
    login = settings.logins.get(mechanism)
    if login is None and props.get("sasl.jaas.config"):
        module = _login_module(props["sasl.jaas.config"], mechanism, "sasl.jaas.config")
        if "username" in module.options and "password" in module.options:
            login = SaslCredentials(mechanism, module.options["username"], module.options["password"])
    if login is None:
        raise SaslConfigError(f"the inter-broker listener {listener} uses SASL {mechanism}, but no username and "
                              f"password are set for it: add username=\"...\" password=\"...\" to listener.name."
                              f"{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    return login


def check_global(props: Mapping[str, str]) -> None:
    """Values of settings without a SASL listener to read them, checked anyway so none is wrong unseen."""
    for name in ("connections.max.reauth.ms", "sasl.server.max.receive.size"):
        if props.get(name) is not None:
            _int(props[name], name, 0 if name == "connections.max.reauth.ms" else 1)
    text = props.get("sasl.enabled.mechanisms")
    if text is not None:
        unsupported = [m.strip() for m in text.split(",") if m.strip() and m.strip() not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise SaslConfigError(f"sasl.enabled.mechanisms: {', '.join(unsupported)} is not implemented by kbroker "
                                  f"(it implements {', '.join(SUPPORTED_MECHANISMS)})")
