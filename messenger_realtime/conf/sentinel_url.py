"""The redis+sentinel:// URL, as a pure rule (no client here: backplane/sentinel.py makes
the clients; the system checks E024 and E026 read it through conf/layer_hosts.py).

    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB][?sentinel_password=...]

HOST:PORT are the Sentinels (port 26379 unless given), SERVICE the master's name in their
configuration (`sentinel monitor SERVICE ...`), DB the database number (0). The user
and password are the master's; `sentinel_password` (and `sentinel_username`) the
Sentinels' own, when they require one.
"""

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() == SCHEME


@dataclass(frozen=True)
class SentinelURL:
    """A parsed redis+sentinel:// URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a log line
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)


def parse(url: str) -> SentinelURL:
    """`url` parsed; ValueError saying what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme.lower() != SCHEME:
        raise ValueError(f"is not a {SCHEME}:// URL")
    credentials, _, hosts = parts.netloc.rpartition("@")
    username, _, password = credentials.partition(":")
    sentinels = []
    for entry in hosts.split(","):
        host, port = _host_port(entry)
        sentinels.append((host, port))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError("names no service (redis+sentinel://HOST:PORT,.../SERVICE[/DB])")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError("has a path other than /SERVICE or /SERVICE/DB (DB a number)")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = sorted(set(query) - {"sentinel_password", "sentinel_username"})
    if unknown:
        raise ValueError(f"has unknown options {unknown} (sentinel_password, sentinel_username)")
    return SentinelURL(
        sentinels=tuple(sentinels),
        service=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
    )


def _host_port(entry: str) -> tuple[str, int]:
    if not entry:
        raise ValueError("names an empty Sentinel (HOST[:PORT],HOST[:PORT],...)")
    if entry.startswith("["):  # [IPv6]:port
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
    if not host:
        raise ValueError(f"names a Sentinel without a host ({entry!r})")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"names a Sentinel with an invalid port ({entry!r})")
    return host, int(port) if port else DEFAULT_PORT
