"""Settings from the environment: `check --deploy` is clean with a production environment
and refuses placeholder or short secrets by name, and the connection pool is sized from it."""

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.support.runtime import ROOT, manage, project_settings

PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DJANGO_ALLOWED_HOSTS": "messenger.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://messenger.example.com",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "true",
    "DJANGO_SECURE_SSL_REDIRECT": "true",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "DJANGO_SECURE_HSTS_PRELOAD": "true",
    "DJANGO_SECURE_COOKIES": "true",
    "DEMO_ENABLED": "false",
}


def production_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **PRODUCTION}
    for name in ("DJANGO_SECRET_KEY", "JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY"):
        env[name] = secrets.token_urlsafe(48)
    env["TURN_SHARED_SECRET"] = secrets.token_urlsafe(48)
    return {**env, **extra}


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        manage("check", "--deploy", "--fail-level", "WARNING"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_deploy_is_clean_with_a_production_environment() -> None:
    result = check_deploy(production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_what_a_local_environment_leaves_insecure() -> None:
    env = production_env(DEMO_ENABLED="true")
    for name in (
        "DJANGO_SECURE_SSL_REDIRECT",
        "DJANGO_SECURE_HSTS_SECONDS",
        "DJANGO_SECURE_COOKIES",
    ):
        env.pop(name)
    result = check_deploy(env)
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr, check
    assert "messenger.W001" in result.stderr


def database_settings(**env: str) -> dict[str, object]:
    expression = (
        "{'CONN_MAX_AGE': settings.DATABASES['default']['CONN_MAX_AGE'],"
        " 'OPTIONS': settings.DATABASES['default']['OPTIONS']}"
    )
    return dict(project_settings(expression, **env))


def test_web_processes_pool_connections_sized_from_the_environment() -> None:
    pooled = database_settings(DATABASE_POOL_MAX_SIZE="7", DATABASE_POOL_MIN_SIZE="2")
    assert pooled["CONN_MAX_AGE"] == 0
    assert pooled["OPTIONS"] == {
        "application_name": "messenger-web",
        "pool": {
            "connection_class": "BoundedConnection",  # every reply within NETWORK_TIMEOUT
            "min_size": 2,
            "max_size": 7,
            "timeout": 10.0,
        },
    }
    unpooled = database_settings(DATABASE_POOL_MAX_SIZE="0", DATABASE_CONN_MAX_AGE="30")
    assert unpooled == {"CONN_MAX_AGE": 30, "OPTIONS": {"application_name": "messenger-web"}}


# compose.yaml's secrets before issue 46: deployed as written, anyone could mint tokens.
OLD_COMPOSE_SECRETS = {
    "DJANGO_SECRET_KEY": "change-me-change-me-change-me-change-me-change-me-change-me",
    "JWT_SIGNING_KEY": "change-me-change-me-change-me-change-me",
    "MEDIA_JWT_SIGNING_KEY": "change-me-change-me-change-me-change-me",
    "TURN_SHARED_SECRET": "change-me-change-me-change-me-change-me",
}


def test_check_deploy_errors_on_compose_s_old_placeholder_secrets_naming_each() -> None:
    result = check_deploy({**production_env(), **OLD_COMPOSE_SECRETS})
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "messenger_realtime.E038" in line]
    assert len(errors) == 4, result.stderr
    for name in OLD_COMPOSE_SECRETS:  # the variable each came from, and only that one
        assert len([line for line in errors if f"${name})" in line]) == 1, name
    assert "secrets.token_urlsafe(48)" in result.stderr  # how to make real ones


@pytest.mark.parametrize(
    "placeholder",
    [
        "CHANGEME_" + secrets.token_hex(24),  # a real-looking tail does not hide it
        "please-replace-me-with-something-long-and-random",
        "your-secret-key-here-your-secret-key-here-your-secret",
        "x" * 64,
        "secret" * 10,
        "django-insecure-" + secrets.token_urlsafe(48),
    ],
)
def test_check_deploy_errors_on_an_obvious_placeholder(placeholder: str) -> None:
    result = check_deploy(production_env(JWT_SIGNING_KEY=placeholder))
    assert result.returncode != 0
    assert "messenger_realtime.E038" in result.stderr
    assert "MESSENGER_REALTIME['JWT_SIGNING_KEY']" in result.stderr
    assert "$JWT_SIGNING_KEY" in result.stderr
    assert placeholder not in result.stdout + result.stderr  # never echoed


@pytest.mark.parametrize(
    "weak",
    [
        secrets.token_urlsafe(30),  # 40 characters: Django asks for 50
        "ab12" * 20,  # 80 characters, 4 distinct: Django asks for 5
    ],
)
def test_check_deploy_errors_on_a_django_secret_key_weaker_than_django_s_rule(weak: str) -> None:
    result = check_deploy(production_env(DJANGO_SECRET_KEY=weak))
    assert result.returncode != 0
    assert "messenger_realtime.E039" in result.stderr or "messenger_realtime.E038" in (
        result.stderr
    )
    assert "SECRET_KEY" in result.stderr and "$DJANGO_SECRET_KEY" in result.stderr
    assert weak not in result.stdout + result.stderr


def test_check_deploy_errors_on_a_signing_key_shorter_than_hs256_needs() -> None:
    for name in ("JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET"):
        result = check_deploy(production_env(**{name: secrets.token_hex(15)}))  # 30 bytes
        assert result.returncode != 0, name
        assert "messenger_realtime.E012" in result.stderr, name
        assert f"MESSENGER_REALTIME['{name}'] (the value of ${name})" in result.stderr, name


def test_check_deploy_is_clean_with_the_secrets_make_secrets_writes(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    subprocess.run(["bash", str(ROOT / "scripts" / "make-secrets"), str(path)], check=True)
    made = dict(line.split("=", 1) for line in path.read_text().splitlines())
    assert set(made) == set(OLD_COMPOSE_SECRETS)
    result = check_deploy({**production_env(), **made})
    assert result.returncode == 0, result.stdout + result.stderr
