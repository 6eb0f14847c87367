#!/bin/sh
# The stand-in nginx image's entrypoint (scripts/standins/), doing what the upstream
# image's does before it starts nginx: every file in /docker-entrypoint.d/, in version
# order, a *.envsh sourced (it may export settings for what follows) and a *.sh run, each
# only when executable; then the command.
set -e
if [ "$1" = nginx ] || [ "$1" = nginx-debug ]; then
    for f in $(find /docker-entrypoint.d/ -follow -type f -print | sort -V); do
        if [ ! -x "$f" ]; then
            echo "$0: ignoring $f, not executable"
            continue
        fi
        case "$f" in
            *.envsh)
                echo "$0: sourcing $f"
                # shellcheck source=/dev/null
                . "$f"
                ;;
            *.sh) echo "$0: running $f"; "$f" ;;
            *) echo "$0: ignoring $f" ;;
        esac
    done
    echo "$0: configuration complete; ready for start up"
fi
exec "$@"
