"""Create the database named in DATABASE_URL if it does not exist yet.

--fresh drops it first: the benchmarks' scratch databases start empty every run, so a
migration history from another checkout can never get in the way. --drop drops it and
creates nothing (scripts/container-smoke's clean-up of its own database).
"""

import os
import sys

import environ
import psycopg
from psycopg import sql

url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger")
config = environ.Env.db_url_config(url)
params = {
    "dbname": "postgres",
    "user": config.get("USER") or None,
    "password": config.get("PASSWORD") or None,
    "host": config.get("HOST") or None,
    "port": config.get("PORT") or None,
    # The URL's libpq options: with several hosts (a primary and its standbys),
    # target_session_attrs=read-write keeps CREATE DATABASE off a standby.
    **config.get("OPTIONS", {}),
}
name = config["NAME"]
with psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
    if {"--fresh", "--drop"} & set(sys.argv[1:]):
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if "--drop" in sys.argv[1:]:
            sys.exit(0)
    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if not exists:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        print(f"created database {name}", file=sys.stderr)
