#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    # A command runs on one thread: a connection pool only adds a wait in front of the
    # database's own error (a refused port, a wrong password surfaced as "couldn't get a
    # connection after 10 s"). Without it the first query fails at once with the cause.
    # `check` reads the settings the web process runs with (the pool's check, W005).
    if sys.argv[1:2] != ["check"]:
        os.environ["DATABASE_POOL_MAX_SIZE"] = "0"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
