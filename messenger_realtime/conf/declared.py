"""Every MESSENGER_REALTIME key, declared once.

One row per key: its type, default, the process that reads it, its unit, a line of what
it does, and the rules its value must meet (each with a stable check id). Parsing and
the loaders (settings.py), the system checks (checks.py), the worker's
`--help`, and the settings table in docs/operations.md are all derived from this table;
tests/unit/test_settings_table.py fails when the docs table and this one disagree
(`python -m messenger_realtime.conf.declared` prints the table to paste).

Rules that compare keys (BACKOFF_CAP against BACKOFF_BASE, CLIENT_TIMEOUT against
KEEPALIVE_INTERVAL) sit on the row of the key they refuse, reading the others through the
merged values.
"""

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from messenger_realtime.conf.layer_hosts import url_problem

WORKER = "worker"
HUB = "hub"

MIN_JWT_KEY_BYTES = 32  # RFC 7518: an HS256 key at least as long as the hash
MAX_JWT_LEEWAY = 60.0  # clock skew is seconds; more would only lengthen every token
# Twisted's own write buffer threshold: a smaller bound would close healthy connections
# on a single large event.
MIN_SEND_BUFFER_LIMIT = 64 * 1024
# A replay buffer smaller than a few events would give up on healthy connections.
MIN_REPLAY_BUFFER = 16 * 1024
MAX_DISCONNECT_TIMEOUT = 300.0
TRANSPORT_NAMES = ("WebSockets", "ServerSentEvents", "LongPolling")
# Each partition's leader holds up to five database sessions, its standbys two each.
MAX_DISPATCH_PARTITIONS = 64
# A negotiate held longer than the official clients' request timeout (100 s in the
# JavaScript and .NET clients) would be abandoned by them: stay well inside it. The
# default is this bound: a client shed sooner only sits out its next retry delay.
MAX_ADMISSION_WAIT = 60.0
# Coalescing trades latency for CPU: an event in a stream waits at most this much more.
MAX_WAKE_COALESCE = 0.1
# User content the API accepts must stay inside what the build accepts from the database
# (contracts/content.py WIRE_LIMITS, `fileMeta` one level down in its payload), so an
# accepted message is always delivered: each CONTENT_MAX_* key's upper bound.
CONTENT_BOUNDS = {
    "CONTENT_MAX_DEPTH": 16,
    "CONTENT_MAX_ENTRIES": 10_000,
    "CONTENT_MAX_KEY_LENGTH": 1_000,
    "CONTENT_MAX_STRING": 1_000_000,
}
# The official client abandons a poll after 100 s: the server must answer before.
CLIENT_POLL_TIMEOUT = 100.0
# The official clients drop a connection after 30 s without a message from the server
# (serverTimeoutInMilliseconds) and expect a keep-alive at half that.
CLIENT_SERVER_TIMEOUT = 30.0
# The shortest lease (E031): three heartbeats of at least a second each.
MIN_LOCK_TTL = 3.0
# NETWORK_TIMEOUT's range (E037): below 3 s the keepalives derived from it (a probe every
# third of it, whole seconds) no longer fit inside it, and a slow but live peer (a busy
# server, a long round trip) would be taken for gone; above a minute a lost flow stops
# deliveries (the hub) or dispatch (the worker) for longer than a client waits.
MIN_NETWORK_TIMEOUT, MAX_NETWORK_TIMEOUT = 3.0, 60.0


@dataclass(frozen=True)
class Rule:
    """A rule a key's value must meet: `holds(value, all merged values)`."""

    check_id: str
    holds: Callable[[Any, Mapping[str, Any]], bool]
    problem: str  # "must be > 0": the check's message after the key (and the docs')
    explain: Callable[[Any], str] | None = None  # the message for a given bad value

    def message(self, value: Any) -> str:
        return self.explain(value) if self.explain is not None else self.problem


def above(least: float, check_id: str, unit: str = "") -> Rule:
    return Rule(check_id, lambda v, _: v > least, f"must be > {least:g}{unit}")


def at_least(least: float, check_id: str, why: str = "") -> Rule:
    return Rule(check_id, lambda v, _: v >= least, f"must be >= {least:g}{why}")


def within(least: float, most: float, check_id: str, why: str = "") -> Rule:
    return Rule(check_id, lambda v, _: least <= v <= most, f"must be in [{least:g}, {most:g}]{why}")


def at_most(most: float, why: str) -> Rule:
    """An upper bound past which a value can only be a typo (E027)."""
    return Rule("E027", lambda v, _: v <= most, f"must be at most {most:g} ({why})")


POSITIVE = above(0, "E007", " seconds")  # every duration


def _ip_address(value: Any, _: Mapping[str, Any]) -> bool:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def _secret() -> Rule:
    return Rule(
        "E012",
        lambda v, _: len(str(v).encode()) >= MIN_JWT_KEY_BYTES,
        f"must be set, at least {MIN_JWT_KEY_BYTES} bytes",
    )


def _media_secret() -> Rule:
    """A media secret is needed only by a host whose DomainPort reads calls (media
    credentials are minted for calls alone): contracts/checks.py requires it there."""
    return Rule(
        "E012",
        lambda v, _: v == "" or len(str(v).encode()) >= MIN_JWT_KEY_BYTES,
        f"must be at least {MIN_JWT_KEY_BYTES} bytes (set when the DomainPort reads calls)",
    )


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type  # int, float (a duration, factor or fraction), str, bool, list, dict
    default: Any
    roles: frozenset[str]  # the processes that read (and so validate) it
    unit: str
    doc: str  # one line: what it does
    rules: tuple[Rule, ...] = ()
    secret: bool = False  # never shown (repr, --help, logs)

    @property
    def env(self) -> str:
        """The environment variable that overrides it (the spec names one plainly)."""
        plain = self.name == "REALTIME_BACKPLANE_ENABLED"
        return self.name if plain else f"MESSENGER_REALTIME_{self.name}"


W, H, BOTH = frozenset({WORKER}), frozenset({HUB}), frozenset({WORKER, HUB})


def _key(
    name: str,
    kind: type,
    default: Any,
    roles: frozenset[str],
    unit: str,
    doc: str,
    *rules: Rule,
    secret: bool = False,
) -> Setting:
    return Setting(name, kind, default, roles, unit, doc, rules, secret)


def _cap_at_least_base(cap: Any, values: Mapping[str, Any]) -> bool:
    base = values.get("BACKOFF_BASE", 0)
    return bool(base <= 0 or cap <= 0 or cap >= base)


def _lease_long_enough(ttl: Any, _: Mapping[str, Any]) -> bool:
    return bool(ttl <= 0 or ttl >= MIN_LOCK_TTL)  # (a non-positive one is E007's)


def _timeout_past_keepalive(timeout: Any, values: Mapping[str, Any]) -> bool:
    keepalive = values.get("KEEPALIVE_INTERVAL", 1)
    return bool(timeout <= 0 or keepalive < timeout)  # (a non-positive one is E007's)


def _deadlines_positive(deadlines: Any, _: Mapping[str, Any]) -> bool:
    return all(seconds > 0 for seconds in deadlines.values())


def _ice_urls(urls: Any, _: Mapping[str, Any]) -> bool:
    return all(str(u).startswith(("stun:", "turn:", "turns:")) for u in urls)


def _transports(names: Any, _: Mapping[str, Any]) -> bool:
    return bool(names) and all(name in TRANSPORT_NAMES for name in names)


def _redis_url_or_empty(url: Any, _: Mapping[str, Any]) -> bool:
    return not url or url_problem(str(url)) is None


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # -- the worker (dispatch_realtime) ----------------------------------------------------
    _key("POLLING_INTERVAL", float, 1.0, W, "s", "the safety-net poll when no NOTIFY comes; "
         "a standby's look at the lease", POSITIVE,
         at_most(60.0, "seconds; the worker's safety-net poll")),
    _key("BATCH_SIZE", int, 200, W, "rows", "rows per claim", above(0, "E003"),
         at_most(10_000, "rows per claim")),
    _key("MAX_RUN_DURATION", float, 5.0, W, "s", "a pass's batches end after this long "
         "(suspects then get a quarter of it)", POSITIVE, at_most(600.0, "seconds per pass")),
    _key("MAX_ATTEMPTS", int, 8, W, "attempts", "claims of a row before it is quarantined",
         above(0, "E004"), at_most(1_000, "attempts")),
    _key("BACKOFF_BASE", float, 2.0, W, "s", "the first retry's delay", above(0, "E005"),
         at_most(3_600.0, "seconds")),
    _key("BACKOFF_FACTOR", float, 2.0, W, "", "each retry's delay times this",
         at_least(1, "E005"), at_most(100.0, "times the previous delay")),
    _key("BACKOFF_CAP", float, 120.0, W, "s", "the longest retry delay", above(0, "E005"),
         Rule("E006", _cap_at_least_base, "must be >= BACKOFF_BASE"),
         at_most(86_400.0, "seconds")),
    _key("BACKOFF_JITTER", float, 0.2, W, "", "a retry comes up to this fraction earlier "
         "(drawn per row)", Rule("E008", lambda v, _: 0 <= v < 1, "must be in [0, 1)")),
    _key("RETENTION_DONE", float, 86_400.0, W, "s", "Done rows older than this are deleted; "
         "also the horizon of Recover", POSITIVE, at_most(30 * 86_400.0, "seconds (30 days)")),
    _key("RETENTION_BATCH", int, 1000, W, "rows", "rows per retention delete, one batch "
         "between passes", above(0, "E010"), at_most(100_000, "rows per delete")),
    _key("RETENTION_INTERVAL", float, 60.0, W, "s", "how often retention runs", POSITIVE,
         at_most(86_400.0, "seconds")),
    _key("PUBLISH_TIMEOUT", float, 5.0, W, "s", "a push not accepted by then is a transient "
         "failure", POSITIVE, at_most(300.0, "seconds")),
    _key("LOCK_TTL", float, 30.0, W, "s", "the lease: a heartbeat every third of it; a "
         "holder silent this long is replaced", POSITIVE,
         Rule("E031", _lease_long_enough, f"must be at least {MIN_LOCK_TTL:g} s: the "
              "leader's heartbeat runs every third of it, and the lease session's "
              "idle-in-transaction limit is at least 1 s"),
         at_most(3_600.0, "seconds; a dead leader's rows wait this long")),
    _key("LOCK_KEY", str, "job:scheduled:messenger-realtime-dispatch", W, "",
         "the advisory lock's name (and the partitions' keys derive from it)",
         Rule("E009", lambda v, _: bool(str(v).strip()), "must not be empty")),
    _key("REALTIME_BACKPLANE_ENABLED", bool, True, W, "", "Redis channel layer (true) or "
         "in-memory with the dispatcher inside the one Daphne (false); E013 if it "
         "contradicts CHANNEL_LAYERS"),
    _key("METRICS_PORT", int, 9108, W, "port", "the worker's /metrics and /health/*; 0 off",
         within(0, 65535, "E010", ": 0 (off) or a TCP port")),
    _key("METRICS_HOST", str, "127.0.0.1", W, "", "the address the worker's /metrics listens on "
         "(0.0.0.0: every interface, for a scraper in another container)",
         Rule("E010", _ip_address, "must be an IP address (127.0.0.1, 0.0.0.0, ::)")),
    _key("BUILD_TIMEOUT", float, 5.0, W, "s", "a batch's domain read not back by then is "
         "abandoned (its rows retried alone); its session's statement_timeout", POSITIVE,
         at_most(300.0, "seconds")),
    _key("DELIVERY_DEADLINES", dict, {"CallInvited": 45.0, "ConferenceInvited": 300.0,
         "ConferenceStarted": 300.0}, W, "s", "kind -> seconds: older rows of these kinds "
         "end Done, not pushed (environment: Kind=seconds,Kind=seconds; only media kinds: "
         "E015 in outbox/checks.py, beside the kinds)",
         Rule("E015", _deadlines_positive, "deadlines must be > 0 seconds")),
    _key("HUB_BACKLOG_LIMIT", int, 200, W, "messages", "queued for one hub process above "
         "which pushes wait", above(0, "E010"), at_most(1_000_000, "messages")),
    _key("HUB_BACKLOG_WAIT", float, 1.0, W, "s", "the longest one push waits for a hub to "
         "catch up", POSITIVE, at_most(60.0, "seconds")),
    _key("DISPATCHED_LOG_SAMPLE", float, 1.0, W, "", "share of Done rows logged as "
         "`dispatched` (0: none; counts stay exact)", within(0, 1, "E016")),
    _key("DISPATCH_PARTITIONS", int, 1, W, "", "K > 1: K leaders, one per partition of the "
         "targets; 1 is the spec's single runner",
         within(1, MAX_DISPATCH_PARTITIONS, "E022")),
    _key("WAKE_COALESCE", float, 0.02, W, "s", "a NOTIFY within this long after a pass that "
         "claimed rows waits until this long after it, so one pass serves several (0: off)",
         within(0, MAX_WAKE_COALESCE, "E023", " seconds (0: off)")),
    # -- both ----------------------------------------------------------------------------
    _key("DOMAIN_PORT", str, "", BOTH, "", "dotted path of the host's DomainPort (E011: "
         "importable, implements it)"),
    _key("NETWORK_TIMEOUT", float, 10.0, BOTH, "s", "a PostgreSQL or Redis connection "
         "silent this long (no reply, no close) is dropped and made again; its keepalives "
         "and TCP_USER_TIMEOUT fit inside it (docs/reliability.md)",
         within(MIN_NETWORK_TIMEOUT, MAX_NETWORK_TIMEOUT, "E037", " seconds: a slow but live "
                "peer must not look gone, a lost one must not stop delivery for long")),
    # -- the hub (Daphne) ----------------------------------------------------------------
    _key("JWT_SIGNING_KEY", str, "", H, "", "HS256 key of the access tokens",
         _secret(), secret=True),
    _key("JWT_ISSUER", str, "messenger", H, "", "the tokens' iss"),
    _key("JWT_AUDIENCE", str, "messenger-realtime", H, "", "the tokens' aud"),
    _key("JWT_LIFETIME", float, 3600.0, H, "s", "tokens minted by `manage.py realtime_token`",
         POSITIVE, at_most(30 * 86_400.0, "seconds (30 days)"),
         Rule("E033", lambda v, values: v <= values.get("JWT_MAX_LIFETIME", v),
              "must be at most JWT_MAX_LIFETIME")),
    _key("JWT_MAX_LIFETIME", float, 86_400.0, H, "s", "a token whose exp is further than "
         "this from its iat is refused (a token must carry iat)", POSITIVE,
         at_most(30 * 86_400.0, "seconds (30 days)")),
    _key("JWT_LEEWAY", float, 2.0, H, "s", "clock skew forgiven on a token's iat, nbf and "
         "exp (a token is valid until exp plus this)",
         within(0, MAX_JWT_LEEWAY, "E034", " (a small skew, not a longer life)")),
    _key("CORS_ALLOWED_ORIGINS", list, [], H, "", "origins negotiate answers with CORS "
         "(comma-separated in the environment)"),
    _key("CONNECTION_TOKEN_TTL", float, 300.0, H, "s", "negotiate -> WebSocket connect",
         POSITIVE, at_most(3_600.0, "seconds; negotiate to connect takes seconds")),
    _key("KEEPALIVE_INTERVAL", float, 15.0, H, "s", "a ping after this long without sending",
         POSITIVE, Rule("E028", lambda v, _: v <= CLIENT_SERVER_TIMEOUT / 2,
                        f"must be at most {CLIENT_SERVER_TIMEOUT / 2:g} s: the official "
                        f"clients close a connection that hears nothing for "
                        f"{CLIENT_SERVER_TIMEOUT:g} s")),
    _key("CLIENT_TIMEOUT", float, 30.0, H, "s", "closed after this long without hearing "
         "from the client", POSITIVE,
         Rule("E028", _timeout_past_keepalive, "must be longer than KEEPALIVE_INTERVAL"),
         at_most(3_600.0, "seconds")),
    _key("HANDSHAKE_TIMEOUT", float, 15.0, H, "s", "a connection without its handshake by "
         "then is closed", POSITIVE, at_most(300.0, "seconds")),
    _key("MAX_MESSAGE_SIZE", int, 32 * 1024, H, "bytes", "per client message (Daphne's "
         "frame and message limits: this + 1024)", above(0, "E010"),
         at_most(16 * 1024 * 1024, "bytes")),
    _key("WEBSOCKET_DEFLATE", bool, True, H, "", "permessage-deflate for the WebSocket clients "
         "that offer it, without context takeover (Daphne; docs/performance.md, Bytes on the "
         "wire)"),
    _key("SEND_BUFFER_LIMIT", int, 1024 * 1024, H, "bytes", "unsent data a connection may "
         "queue before it is closed with allowReconnect",
         at_least(MIN_SEND_BUFFER_LIMIT, "E017"), at_most(1024 * 1024 * 1024, "bytes")),
    _key("STATEFUL_RECONNECT_BUFFER_SIZE", int, 100_000, H, "bytes", "unacked messages kept "
         "per stateful connection (0: stateful reconnect not offered)",
         Rule("E018", lambda v, _: v == 0 or v >= MIN_REPLAY_BUFFER,
              f"must be 0 (stateful reconnect off) or at least {MIN_REPLAY_BUFFER} bytes"),
         at_most(64 * 1024 * 1024, "bytes")),
    _key("DISCONNECT_TIMEOUT", float, 15.0, H, "s", "a connection without its transport is "
         "kept this long (a stateful resume, a long poll's gap)", POSITIVE,
         Rule("E019", lambda v, _: v <= MAX_DISCONNECT_TIMEOUT,
              f"must be at most {MAX_DISCONNECT_TIMEOUT:.0f} s")),
    _key("TRANSPORTS", list, list(TRANSPORT_NAMES), H, "", "offered by negotiate in this "
         "order, the others refused",
         Rule("E021", _transports, f"must name at least one of {', '.join(TRANSPORT_NAMES)}")),
    _key("LONG_POLL_TIMEOUT", float, 90.0, H, "s", "a poll with nothing to deliver is "
         "answered empty after this", POSITIVE,
         Rule("E020", lambda v, _: v < CLIENT_POLL_TIMEOUT,
              f"must be below {CLIENT_POLL_TIMEOUT:.0f} s (the client's own poll timeout)")),
    _key("MEDIA_JWT_SIGNING_KEY", str, "", H, "", "HS256 key of the media room tokens "
         "minted at delivery", _media_secret(), secret=True),
    _key("MEDIA_JWT_ISSUER", str, "messenger", H, "", "the media tokens' iss"),
    _key("MEDIA_JWT_AUDIENCE", str, "media", H, "", "the media tokens' aud"),
    _key("MEDIA_TOKEN_TTL", float, 300.0, H, "s", "a media token's lifetime", POSITIVE,
         at_most(86_400.0, "seconds")),
    _key("TURN_SHARED_SECRET", str, "", H, "", "TURN REST credentials' shared secret",
         _media_secret(), secret=True),
    _key("TURN_TTL", float, 600.0, H, "s", "a TURN credential's lifetime", POSITIVE,
         at_most(86_400.0, "seconds")),
    _key("ICE_SERVERS", list, ["stun:127.0.0.1:3478", "turn:127.0.0.1:3478?transport=udp"],
         H, "", "the ICE servers handed to media clients",
         Rule("E014", _ice_urls, "every entry must be a stun:, turn: or turns: URL")),
    _key("CONTENT_MAX_DEPTH", int, 8, H, "levels", "of nesting in `fileMeta` (the REST API)",
         within(1, CONTENT_BOUNDS["CONTENT_MAX_DEPTH"], "E025")),
    _key("CONTENT_MAX_ENTRIES", int, 100, H, "entries", "keys per object or items per array",
         within(1, CONTENT_BOUNDS["CONTENT_MAX_ENTRIES"], "E025")),
    _key("CONTENT_MAX_KEY_LENGTH", int, 128, H, "characters", "of a key in `fileMeta`",
         within(1, CONTENT_BOUNDS["CONTENT_MAX_KEY_LENGTH"], "E025")),
    _key("CONTENT_MAX_STRING", int, 10_000, H, "characters", "of a body, a card's text or a "
         "string in `fileMeta`", within(1, CONTENT_BOUNDS["CONTENT_MAX_STRING"], "E025")),
    _key("RATE_LIMIT_WINDOW", float, 60.0, H, "s", "the rate limits' window", POSITIVE,
         at_most(86_400.0, "seconds")),
    _key("RATE_LIMIT_WRITES", int, 600, H, "per window", "REST writes per user (0: no limit)",
         at_least(0, "E026", " (0: no limit)"), at_most(1_000_000, "per window")),
    _key("RATE_LIMIT_INVOCATIONS", int, 600, H, "per window", "hub invocations per user "
         "(0: no limit)", at_least(0, "E026", " (0: no limit)"),
         at_most(1_000_000, "per window")),
    _key("RATE_LIMIT_CONNECTS", int, 120, H, "per window", "connects per user: negotiates, "
         "and WebSockets that skip negotiate (0: no limit)",
         at_least(0, "E026", " (0: no limit)"), at_most(1_000_000, "per window")),
    _key("MAX_CONNECTIONS_PER_USER", int, 32, H, "connections", "one user's open connections "
         "across every hub process (counted beside the rate limits); past it a connect is "
         "429 (0: no cap)", at_least(0, "E036", " (0: no cap)"),
         at_most(100_000, "connections per user")),
    _key("RATE_LIMIT_FLOOD", int, 20, H, "refusals", "a connection refused this often is "
         "closed", at_least(1, "E026"), at_most(100_000, "refusals")),
    _key("INVOCATION_BUDGET", float, 20.0, H, "units/s", "what one connection's invocations "
         "may cost a second, every method and Ping (hub/connection/methods/: a unit is a "
         "GetGroups); past it a call is refused", above(0, "E026"),
         at_most(1_000_000.0, "units a second")),
    _key("INVOCATION_BURST", int, 100, H, "units", "what one connection may spend at once "
         "(a page's calls at connect)", at_least(1, "E026"), at_most(1_000_000, "units")),
    _key("RATE_LIMIT_REDIS_URL", str, "", H, "", "where the counters live (empty: nothing "
         "is counted)", Rule("E026", _redis_url_or_empty,
                             "must be empty or a redis://, rediss://, unix:// or "
                             "redis+sentinel:// URL")),
    _key("ADMISSION_LIMIT", int, 200, H, "connects", "in progress per hub process, past "
         "which a negotiate waits in line", at_least(1, "E029"),
         at_most(100_000, "connects in progress per hub process")),
    _key("ADMISSION_PER_USER", int, 8, H, "connects", "one user's connects in progress "
         "(negotiated, or upgraded without negotiate, and not handshaken yet); past it 429 "
         "(a WebSocket: refused)", at_least(1, "E029"),
         at_most(1_000, "connects held per user")),
    _key("ADMISSION_WAIT", float, 60.0, H, "s", "a negotiate waits in line this long, then "
         "503 with Retry-After (0: at once)",
         within(0, MAX_ADMISSION_WAIT, "E029", " seconds (0: none)")),
    _key("RECOVERY_MAX_EVENTS", int, 1000, H, "events", "one Recover call sends at most "
         "this many, over all its streams; the streams past it: resync", at_least(1, "E030"),
         at_most(100_000, "events per recovery")),
    _key("RECOVERY_MAX_BYTES", int, 256 * 1024, H, "bytes", "one Recover call sends at most "
         "this much, or half of SEND_BUFFER_LIMIT if less (a recovery never overflows a "
         "drained connection); the streams past it: resync", at_least(16 * 1024, "E035"),
         at_most(1024 * 1024 * 1024, "bytes")),
)
# fmt: on
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def role_keys(role: str) -> frozenset[str]:
    """The keys a process role reads (and so validates)."""
    return frozenset(s.name for s in SETTINGS if role in s.roles)


def validate(values: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(check id, key, problem) for every rule the merged values break (a key missing
    from `values` failed to parse: E002 said so already)."""
    found = []
    for setting in SETTINGS:
        if setting.name not in values:
            continue
        value = values[setting.name]
        for rule in setting.rules:
            if not rule.holds(value, values):
                found.append((rule.check_id, setting.name, rule.message(value)))
    return found


def _shown(setting: Setting) -> str:
    value = setting.default
    if setting.secret:
        return "(its variable, or a dev key)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v:g}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(value) if value else "(none)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "(none)"


# docs/operations.md holds the table between these two lines.
TABLE_BEGIN = "<!-- settings table: python -m messenger_realtime.conf.declared -->"
TABLE_END = "<!-- end of the settings table -->"


def markdown_table() -> str:
    """The settings table of docs/operations.md, from the declaration."""
    lines = [
        "| environment (the key: after `MESSENGER_REALTIME_`) | read by | default | unit | what"
        " | checks |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in SETTINGS:
        checks = "; ".join(f"{r.check_id}: {r.problem}" for r in s.rules)
        roles = " and ".join(sorted(s.roles))
        cells = [f"`{s.env}`", roles, f"`{_shown(s)}`", s.unit, s.doc, checks]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
