"""The packaging files, read as text (CI also builds and runs them with podman:
scripts/container-smoke): exact base versions, each with a stand-in for machines that
cannot pull it, no BuildKit frontend to fetch, healthchecks everywhere, the npm build stage
and collected static files in the image, only the proxy published, its redirect to the
published HTTPS port, the call reaper scheduled, a lean build context."""

import os
import re
import subprocess
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.packaging import build_wheel
from tests.support.runtime import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
COMPOSE = (ROOT / "compose.yaml").read_text()


def stages() -> list[tuple[str, str]]:
    """(base, stage name) of every FROM."""
    return re.findall(r"^FROM (\S+)(?: AS (\S+))?$", DOCKERFILE, re.M)


def services() -> dict[str, str]:
    """compose.yaml's services, each as its block of text."""
    body = COMPOSE[COMPOSE.index("\nservices:\n") :].split("\nvolumes:\n")[0]
    names = re.findall(r"^  (\w[\w-]*):", body, re.M)
    blocks = re.split(r"^  \w[\w-]*:.*$", body, flags=re.M)[1:]
    return dict(zip(names, blocks, strict=True))


def test_every_base_image_is_an_exact_version() -> None:
    names = {name for _, name in stages() if name}
    external = [base for base, _ in stages() if base not in names]
    assert external, "no FROM"
    for base in external:
        assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+(-[\w.-]+)?(@sha256:[0-9a-f]{64})?", base), base
    for image in re.findall(r"^\s+image: (\S+)$", COMPOSE, re.M):
        assert re.fullmatch(r"[\w./-]+:\d+\.\d+(\.\d+)?-[\w.]+", image), image


def test_the_dockerfile_needs_no_buildkit_frontend_image() -> None:
    # A `# syntax=` line makes BuildKit fetch a frontend image first: offline, no build.
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE, re.M | re.I)


def test_every_base_image_has_a_stand_in() -> None:
    # Where no registry answers, scripts/container-smoke builds each base from Debian's
    # packages (scripts/standins/KIND.Containerfile) under the FROM line's exact name.
    names = {name for _, name in stages() if name}
    for base in (base for base, _ in stages() if base not in names):
        kind = base.split(":")[0].rsplit("/", 1)[-1]
        assert (ROOT / "scripts" / "standins" / f"{kind}.Containerfile").is_file(), base


def test_ci_runs_the_readme_test_command_and_the_container_smoke() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/container-smoke" in ci and 'bash scripts/test "$@"' in ci


def test_the_image_builds_signalr_with_npm_collects_static_runs_as_a_user_with_a_healthcheck() -> (
    None
):
    assert "npm ci --omit=dev" in DOCKERFILE
    assert "--from=web-assets /build/node_modules/@microsoft/signalr/dist/browser" in DOCKERFILE
    assert "manage.py collectstatic --noinput" in DOCKERFILE
    assert "--from=app /app/static /srv/static" in DOCKERFILE  # the proxy serves them
    assert DOCKERFILE.count("HEALTHCHECK ") == 2  # the app's and the proxy's
    assert re.search(r"^USER app$", DOCKERFILE, re.M)
    assert stages()[-1] == ("app", "")  # `docker build .` gives the app
    assert "requirements-dev" not in DOCKERFILE  # runtime requirements only


def test_the_build_context_leaves_out_local_state_and_tooling() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "node_modules", ".local", "tests", "bench"} <= ignored


def test_every_service_has_a_healthcheck_and_only_the_proxy_is_published() -> None:
    found = services()
    assert set(found) == {"postgres", "redis", "migrate", "web", "worker", "reaper", "proxy"}
    for name, block in found.items():
        assert "healthcheck:" in block, name
    published = {name for name, block in found.items() if "ports:" in block}
    assert published == {"proxy"}
    assert "reap_calls --every" in " ".join(
        re.findall(r'"([^"]+)"', found["reaper"].split("command:")[1].splitlines()[0])
    )
    assert '"dispatch_realtime"' in found["worker"]
    assert "--proxy-headers" in found["web"]
    assert "target: proxy" in found["proxy"]


def test_the_proxy_makes_a_self_signed_certificate_only_when_none_is_mounted(
    tmp_path: Path,
) -> None:
    script = ROOT / "ops" / "nginx" / "05-self-signed-certificate.sh"
    env = {
        **os.environ,
        "TLS_CERT": str(tmp_path / "tls" / "tls.crt"),
        "TLS_KEY": str(tmp_path / "tls" / "tls.key"),
        "SERVER_NAME": "localhost",
    }
    first = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True)
    assert first.returncode == 0 and "self-signed" in first.stdout
    made = (tmp_path / "tls" / "tls.crt").read_bytes()
    assert made.startswith(b"-----BEGIN CERTIFICATE-----")
    again = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == ""
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == made


def test_the_proxy_drops_the_nginx_images_own_site_and_redirects_to_the_published_port() -> None:
    # Read before ours, the image's default.conf (listen 80, server_name localhost) would
    # answer plain HTTP with its welcome page.
    proxy_stage = DOCKERFILE[DOCKERFILE.index(" AS proxy") :]
    assert "rm /etc/nginx/conf.d/default.conf" in proxy_stage
    template = (ROOT / "ops" / "nginx" / "messenger.conf.template").read_text()
    assert "return 301 https://$host$messenger_https_port$request_uri;" in template
    proxy = services()["proxy"]
    assert 'PUBLIC_HTTPS_PORT: "${HTTPS_PORT:-8443}"' in proxy
    assert '"${HTTPS_PORT:-8443}:443"' in proxy
    # The nginx image's entrypoint runs (*.sh) or sources (*.envsh) executable files only.
    for script in ("05-self-signed-certificate.sh", "10-public-https-port.envsh"):
        assert os.access(ROOT / "ops" / "nginx" / script, os.X_OK), script
        assert f"ops/nginx/{script}" in DOCKERFILE


@pytest.mark.parametrize(
    ("environment", "public"),
    [
        ({"PROXY_HTTPS_PORT": "443"}, "443"),
        ({"PROXY_HTTPS_PORT": "127.0.0.1:9443"}, "9443"),
        ({"PROXY_HTTPS_PORT": "443", "PUBLIC_HTTPS_PORT": "8443"}, "8443"),
    ],
)
def test_the_public_https_port_defaults_to_the_one_nginx_listens_on(
    environment: dict[str, str], public: str
) -> None:
    script = ROOT / "ops" / "nginx" / "10-public-https-port.envsh"
    env = {"PATH": os.environ["PATH"], **environment}
    shown = subprocess.run(
        ["sh", "-c", '. "$0"; echo "$PUBLIC_HTTPS_PORT"', str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == public


def test_the_proxy_balances_several_hub_processes_sticky_by_id_as_serve_does() -> None:
    template = (ROOT / "ops" / "nginx" / "messenger.conf.template").read_text()
    assert "hash $hub_key consistent;" in template
    assert "include messenger/http.conf;" in template  # relative to nginx's config dir
    assert "include messenger/locations.conf;" in template
    assert "COPY ops/nginx/messenger /etc/nginx/messenger" in DOCKERFILE
    http = (ROOT / "ops" / "nginx" / "messenger" / "http.conf").read_text()
    assert re.search(r"map \$arg_id \$hub_key \{\s+\"\"\s+\$request_id;\s+default \$arg_id;", http)
    serve = (ROOT / "scripts" / "hubs.sh").read_text()  # scripts/serve --hubs N's nginx
    assert "hash \\$hub_key consistent;" in serve
    assert "include $ROOT/ops/nginx/messenger/http.conf;" in serve
    assert "include $ROOT/ops/nginx/messenger/locations.conf;" in serve
    web = services()["web"]  # HUBS=N replicas, each an upstream server of the proxy
    assert "replicas: ${HUBS:-1}" in web and "restart: unless-stopped" in web
    assert "MESSENGER_UPSTREAM: web:8000" in services()["proxy"]


def test_the_wheel_carries_everything_the_app_needs_at_run_time(tmp_path: Path) -> None:
    import zipfile

    names = set(zipfile.ZipFile(build_wheel(tmp_path)).namelist())
    app = ROOT / "messenger_realtime"
    needed = {
        str(p.relative_to(ROOT))
        for p in app.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert needed - names == set()  # migrations, queries.sql, templates, static, py.typed
    assert {n.split("/")[0] for n in names} == {
        "messenger_realtime",
        next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA")),
    }  # nothing of project/, tests/ or bench/


SECRETS = ("DJANGO_SECRET_KEY", "JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET")


def test_compose_ships_no_secret_and_refuses_to_start_without_real_ones() -> None:
    # Deployed as written, a secret in the file would let anyone mint tokens (issue 46):
    # each comes from the environment or .env, and compose stops naming the script.
    assert "change-me" not in COMPOSE.lower()
    app_env = COMPOSE[COMPOSE.index("x-app-env:") : COMPOSE.index("\nservices:\n")]
    for name in SECRETS:
        found = re.search(rf"^  {name}: (.*)$", app_env, re.M)
        assert found, name
        assert re.fullmatch(rf'"\$\{{{name}:\?[^}}]*scripts/make-secrets[^}}]*\}}"', found[1]), (
            found[1]
        )


def make_secrets(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-secrets"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )


def env_file(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_make_secrets_writes_each_secret_once_into_a_private_env_file(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    made = make_secrets(str(path))
    first = env_file(path)
    assert set(first) == set(SECRETS), made.stdout
    assert len(first["DJANGO_SECRET_KEY"]) >= 50 and len(set(first["DJANGO_SECRET_KEY"])) >= 5
    assert all(len(value.encode()) >= 32 for value in first.values())
    assert len(set(first.values())) == len(SECRETS)  # four keys, not one shared
    assert path.stat().st_mode & 0o777 == 0o600
    # Run again it keeps every key (a new one would log everyone out); it adds what is missing.
    make_secrets(str(path))
    assert env_file(path) == first
    mine = "# mine\nDJANGO_ALLOWED_HOSTS=chat.example.com\n"
    path.write_text(f"{mine}JWT_SIGNING_KEY={first['JWT_SIGNING_KEY']}\n")
    make_secrets(str(path))
    again = env_file(path)
    assert again["JWT_SIGNING_KEY"] == first["JWT_SIGNING_KEY"]
    assert again["DJANGO_ALLOWED_HOSTS"] == "chat.example.com"
    assert set(again) == {*SECRETS, "DJANGO_ALLOWED_HOSTS"}
    assert path.read_text().startswith("# mine\n")


def test_the_env_file_beside_compose_stays_out_of_git_and_of_the_image() -> None:
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-secrets"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "compose.yaml" in made.stdout


def test_compose_migrates_only_after_check_deploy_passes() -> None:
    # Placeholder secrets copied into .env pass `${...:?}`: the one-shot migrate, which
    # every app service waits for, runs `check --deploy` first and stops the stack.
    command = services()["migrate"].split("command:")[1].splitlines()[0]
    check = "python manage.py check --deploy --fail-level ERROR"
    assert f"{check} && exec python manage.py migrate --noinput" in command
    for name in ("web", "worker", "reaper"):
        assert "migrate: {condition: service_completed_successfully}" in services()[name], name


def declared_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def test_every_installed_dependency_is_within_the_ranges_the_wheel_declares() -> None:
    """The ranges a host gets (pyproject.toml) hold what runs here: an upgrade of Twisted,
    Autobahn, Daphne or channels-redis past them (whose internals the hub relies on)
    fails here until the code is checked against it and the bound moved."""
    outside = {
        str(requirement): version(requirement.name)
        for requirement in declared_requirements()
        if not requirement.specifier.contains(version(requirement.name), prereleases=True)
    }
    assert outside == {}
    bounded = {r.name.lower() for r in declared_requirements() if "<" in str(r.specifier)}
    assert {"twisted", "autobahn", "daphne", "channels-redis"} <= bounded


def test_the_app_imports_only_what_it_declares_and_not_django_environ() -> None:
    """A host is not made to install what only this repository's project uses."""
    names = {r.name.lower() for r in declared_requirements()}
    assert "django-environ" not in names
    sources = "\n".join(p.read_text() for p in (ROOT / "messenger_realtime").rglob("*.py"))
    assert not re.search(r"^\s*(import|from) environ\b", sources, re.M)
