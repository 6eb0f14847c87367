"""Settings from the environment: `check --deploy` is clean with a production environment,
and the connection pool is sized from it."""

import os
import secrets
import subprocess

from tests.support.runtime import manage, project_settings

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
    env = {**os.environ, **PRODUCTION, **extra}
    for name in ("DJANGO_SECRET_KEY", "JWT_SIGNING_KEY", "MEDIA_JWT_SIGNING_KEY"):
        env[name] = secrets.token_urlsafe(48)
    env["TURN_SHARED_SECRET"] = secrets.token_urlsafe(48)
    return env


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
        "pool": {"min_size": 2, "max_size": 7, "timeout": 10.0},
    }
    unpooled = database_settings(DATABASE_POOL_MAX_SIZE="0", DATABASE_CONN_MAX_AGE="30")
    assert unpooled == {"CONN_MAX_AGE": 30, "OPTIONS": {"application_name": "messenger-web"}}
