"""The reverse proxy config (ops/nginx/) for real: Debian's nginx, rendered as the nginx
image renders it, with TLS in front of Daphne (production security settings) and the
worker. The official client negotiates, upgrades and receives an event through it;
/metrics and /health/ready stay internal; static files come from collectstatic's output."""

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest

from project.messenger import services
from tests.support.api_client import http_get
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub, HubClient
from tests.support.hub_helpers import token_for
from tests.support.runtime import ROOT, free_port, manage, wait_until
from tests.support.workers import LoggedProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
TEMPLATE = ROOT / "ops" / "nginx" / "messenger.conf.template"
SECURE = {  # what production sets behind the proxy (docs/operations.md, "Deploying")
    "DJANGO_SECURE_PROXY_SSL_HEADER": "true",
    "DJANGO_SECURE_SSL_REDIRECT": "true",
    "DJANGO_SECURE_HSTS_SECONDS": "3600",
    "DJANGO_SECURE_COOKIES": "true",
}


def render(template: str, values: dict[str, str]) -> str:
    """What the nginx image's envsubst does: replace the set ${VARIABLES}, nothing else."""
    rendered = re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
    config = "\n".join(line.split("#")[0] for line in rendered.splitlines())  # not comments
    missing = re.findall(r"\$\{(\w+)\}", config)
    assert missing == [], f"template variables left unset: {missing}"
    return rendered


@dataclass
class Proxy:
    https: str
    http: str
    cert: Path
    access_log: Path

    def get(self, path: str) -> tuple[int, Message, str]:
        context = ssl.create_default_context(cafile=str(self.cert))
        request = urllib.request.Request(self.https + path)
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return response.status, response.headers, response.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers, error.read().decode()


def self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@contextmanager
def nginx_serving(directory: Path, values: dict[str, str], env: dict[str, str]) -> Iterator[None]:
    """Debian's nginx with the template rendered from `values`, its files in `directory`."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.fail("nginx is required (scripts/test installs Debian's nginx)", pytrace=False)
    (directory / "messenger.conf").write_text(render(TEMPLATE.read_text(), values))
    # Its includes (messenger/*.conf) resolve against nginx's config directory.
    (directory / "messenger").symlink_to(TEMPLATE.parent / "messenger")
    # The nginx image's main config, in miniature: everything in the test's directory.
    (directory / "nginx.conf").write_text(
        # As root nginx's worker would run as nobody, who cannot read the test's tmp dir.
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\nworker_processes 1;\npid {directory}/nginx.pid;\n"
        f"error_log {directory}/error.log warn;\nevents {{}}\n"
        f"http {{\n  include /etc/nginx/mime.types;\n"
        + "".join(f"  {k}_temp_path {directory}/{k};\n" for k in ("client_body", "proxy"))
        + "".join(f"  {k}_temp_path {directory}/{k};\n" for k in ("fastcgi", "uwsgi", "scgi"))
        + f"  include {directory}/messenger.conf;\n}}\n"
    )
    argv = [nginx, "-p", str(directory), "-c", str(directory / "nginx.conf")]
    checked = subprocess.run([*argv, "-t"], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    proxy = LoggedProcess(argv, env)
    try:
        https_port = int(values["PROXY_HTTPS_PORT"].rsplit(":", 1)[-1])

        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", https_port)) == 0

        wait_until(listening, what="nginx")
        yield
    finally:
        # SIGTERM: the master stops its worker, which holds our output pipe too.
        proxy.signal(signal.SIGTERM)
        proxy.wait(timeout=15)
        proxy.kill()


def site_values(tmp: Path, upstream: str, http_port: int, https_port: int) -> dict[str, str]:
    """The template's variables, as compose.yaml and the image set them, on loopback."""
    cert, key = self_signed(tmp)
    return {
        "MESSENGER_UPSTREAM": upstream,
        "PROXY_HTTP_PORT": f"127.0.0.1:{http_port}",
        "PROXY_HTTPS_PORT": f"127.0.0.1:{https_port}",
        "PUBLIC_HTTPS_PORT": str(https_port),
        "SERVER_NAME": "localhost",
        "TLS_CERT": str(cert),
        "TLS_KEY": str(key),
        "STATIC_ROOT": str(tmp / "static"),
        "ACCESS_LOG": str(tmp / "access.log"),
    }


@pytest.fixture
def hub_behind_proxy(worker_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[Hub, Proxy]]:
    static = tmp_path / "static"
    env = dict(worker_env, DJANGO_STATIC_ROOT=str(static), **SECURE)
    subprocess.run(manage("collectstatic", "--noinput", "-v0"), env=env, check=True, timeout=120)
    hub = Hub(env)
    try:
        https_port, http_port = free_port(), free_port()
        values = site_values(tmp_path, f"127.0.0.1:{hub.daphne.port}", http_port, https_port)
        with nginx_serving(tmp_path, values, env):
            urls = f"https://localhost:{https_port}", f"http://127.0.0.1:{http_port}"
            yield hub, Proxy(*urls, Path(values["TLS_CERT"]), Path(values["ACCESS_LOG"]))
    finally:
        hub.close()


def test_the_official_client_negotiates_connects_and_receives_through_the_tls_proxy(
    hub_behind_proxy: tuple[Hub, Proxy],
) -> None:
    hub, proxy = hub_behind_proxy
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    env = dict(hub.env, NODE_EXTRA_CA_CERTS=str(proxy.cert))  # trust the test's own CA
    client = HubClient(
        "@microsoft/signalr", f"{proxy.https}/hubs/messenger", token_for(bob.id), env
    )
    try:
        client.next("state", "connected")
        assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
        message = services.post_message(alice.id, chat.id, "through the proxy")
        assert client.message()["messageId"] == str(message.id)
    finally:
        client.kill()
    # nginx logs the WebSocket upgrade once the connection ends, after the client's exit.
    upgraded = r'"GET /hubs/messenger HTTP/1.1" 101'
    wait_until(lambda: re.search(upgraded, proxy.access_log.read_text()), what="the upgrade")
    log = proxy.access_log.read_text()
    assert re.search(r'"POST /hubs/messenger/negotiate HTTP/1.1" 200', log), log
    assert "access_token" not in log and token_for(bob.id)[:20] not in log


def test_metrics_stay_internal_static_comes_from_the_proxy_and_http_goes_to_https(
    hub_behind_proxy: tuple[Hub, Proxy],
) -> None:
    hub, proxy = hub_behind_proxy
    assert proxy.get("/metrics")[0] == 404
    assert proxy.get("/health/ready")[0] == 404  # its causes name internal hosts
    assert proxy.get("/health/live")[0] == 200  # the proxy's own health check
    assert http_get(f"{hub.daphne.http}/metrics")[0] == 200  # Prometheus scrapes Daphne
    assert http_get(f"{hub.daphne.http}/health/ready")[0] == 200  # probes: no redirect

    status, headers, body = proxy.get("/static/vendor/signalr/signalr.min.js")
    assert (status, headers.get_all("Cache-Control")) == (200, ["max-age=604800", "public"])
    assert "signalR" in body
    assert not any("/static/" in line for line in hub.daphne.lines)  # nginx served it

    status, headers, _ = proxy.get("/admin/login/")
    assert status == 200 and headers["Strict-Transport-Security"] == "max-age=3600"
    assert "Secure" in headers["Set-Cookie"]  # the CSRF cookie, over HTTPS only

    # Plain HTTP: to HTTPS on its published port (PUBLIC_HTTPS_PORT), the path kept.
    https_port = proxy.https.rsplit(":", 1)[1]
    assert redirect_of(f"{proxy.http}/admin/login/?next=/") == (
        301,
        f"https://127.0.0.1:{https_port}/admin/login/?next=/",
    )


@pytest.mark.parametrize(("published", "port_in_url"), [("443", ""), ("8443", ":8443")])
def test_plain_http_redirects_to_the_published_https_port_named_unless_it_is_443(
    tmp_path: Path, published: str, port_in_url: str
) -> None:
    # compose.yaml publishes 443 as 8443 (PUBLIC_HTTPS_PORT); 443 itself goes unnamed.
    values = site_values(tmp_path, "127.0.0.1:9", free_port(), free_port())
    values["PUBLIC_HTTPS_PORT"] = published
    with nginx_serving(tmp_path, values, dict(os.environ)):
        http = "http://" + values["PROXY_HTTP_PORT"]
        assert redirect_of(f"{http}/demo/?x=1") == (
            301,
            f"https://127.0.0.1{port_in_url}/demo/?x=1",
        )


def redirect_of(url: str) -> tuple[int, str]:
    """The status and Location of `url`'s answer, the redirect not followed."""
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as moved:
        opener.open(urllib.request.Request(url), timeout=10)
    with moved.value as response:
        return response.code, response.headers["Location"]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None
