#!/bin/sh
# The stand-in nginx image's template step (scripts/standins/), as the upstream image's:
# each /etc/nginx/templates/NAME.template becomes /etc/nginx/conf.d/NAME, with envsubst
# replacing the ${VARIABLES} set in the environment and nothing else (nginx's own
# $variables, and unset names, stay as written).
set -e
templates=${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}
suffix=${NGINX_ENVSUBST_TEMPLATE_SUFFIX:-.template}
output=${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}
[ -d "$templates" ] || exit 0
defined=$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/${\1}/p' | tr '\n' ' ')
find "$templates" -follow -type f -name "*$suffix" -print | while read -r template; do
    relative=${template#"$templates/"}
    target="$output/${relative%"$suffix"}"
    mkdir -p "$(dirname "$target")"
    echo "$0: envsubst $template -> $target"
    envsubst "$defined" <"$template" >"$target"
done
