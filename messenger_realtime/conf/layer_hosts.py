"""The channel layer's Redis hosts (CHANNEL_LAYERS['default']['CONFIG']['hosts']) as a
pure rule, for system check E024.

The project builds the list from CHANNEL_REDIS_URLS (comma-separated, default REDIS_URL).
channels-redis would take a wrong list quietly: an empty one means localhost:6379, a typo
fails only at the first push or connect, and the same server listed twice becomes two
ring positions on one server. So each entry is checked here, before a process starts.
"""

import re
from typing import Any
from urllib.parse import urlsplit

from messenger_realtime.conf import sentinel_url

SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")
SETTING = "CHANNEL_REDIS_URLS"


def shown(url: str) -> str:
    """The URL without its credentials (a Redis password must never reach a log)."""
    return re.sub(r"//[^@/]*@", "//***@", url)


def split_urls(value: str) -> list[str]:
    """Comma-separated Redis URLs (CHANNEL_REDIS_URLS), each stripped and kept as written
    (an empty one too, for E024 to name). A redis+sentinel:// URL's own commas, between
    its Sentinels, stay inside it: a piece without a scheme continues the Sentinel URL
    before it while that one has not reached its /SERVICE yet."""
    urls: list[str] = []
    for piece in (p.strip() for p in value.split(",")):
        previous = urls[-1] if urls else ""
        unfinished = sentinel_url.is_sentinel(previous) and "/" not in previous.split("://", 1)[1]
        if unfinished and piece and "://" not in piece:
            urls[-1] = f"{previous},{piece}"
        else:
            urls.append(piece)
    return urls


def url_problem(url: str) -> str | None:
    """Why `url` is not a usable Redis URL, or None."""
    if not url:
        return "is empty"
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return "is not a redis://, rediss://, unix:// or redis+sentinel:// URL"
    if parts.scheme == "redis+sentinel":
        try:
            sentinel_url.parse(url)
        except ValueError as exc:
            return str(exc)
        return None
    if parts.scheme == "unix":
        return None if parts.path else "names no socket path"
    try:
        parts.port  # noqa: B018  (parsing it is the check: a bad port raises)
    except ValueError:
        return "has an invalid port"
    if not parts.hostname:
        return "names no host"
    database = parts.path.lstrip("/")
    if database and not database.isdigit():
        return "has a database that is not a number (redis://host:port/DB)"
    return None


def host_problems(hosts: Any) -> list[str]:
    """Every problem of a channels-redis `hosts` value (URL entries; a dict without an
    "address", such as a Sentinel entry, or a (host, port) pair is taken as given)."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        return ["must be a list of Redis URLs"]
    if not hosts:
        return ["is empty (channels-redis would use localhost:6379)"]
    problems = []
    seen: set[str] = set()
    for number, entry in enumerate(hosts, start=1):
        url = entry.get("address") if isinstance(entry, dict) else entry
        if not isinstance(url, str):
            continue
        problem = url_problem(url)
        if problem is None and url in seen:
            problem = "lists the same server again (one server would take two ring positions)"
        seen.add(url)
        if problem:
            problems.append(f"entry {number} ({shown(url)!r}) {problem}")
    return problems
