#!/usr/bin/env bash
# The catalog's third-party front-end assets, from the npm registry through
# catalog/web/package-lock.json: Swagger UI and ReDoc (/docs, /redoc) and axe-core (the
# console's accessibility tests). Copied into mol_catalog/console/static/vendor/
# (git-ignored; the wheel ships it, see [tool.hatch.build] artifacts). Runs `npm ci` only
# when the lockfile changed since the last copy, so a second run costs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
web=catalog/web
vendor=catalog/mol_catalog/console/static/vendor
stamp=$vendor/.lock-sha256
want=$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || {
  echo "console assets: npm not found; install Node.js 20+ (Debian: apt-get install npm)" >&2
  exit 1
}
echo "console assets: npm ci (Swagger UI, ReDoc, axe-core)" >&2
npm ci --prefix "$web" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
rm -rf "$vendor"
mkdir -p "$vendor/swagger-ui" "$vendor/redoc" "$vendor/axe-core"
modules=$web/node_modules
cp "$modules"/swagger-ui-dist/{swagger-ui-bundle.js,swagger-ui.css,favicon-32x32.png,LICENSE} \
   "$vendor/swagger-ui/"
cp "$modules"/redoc/bundles/redoc.standalone.js "$modules"/redoc/LICENSE "$vendor/redoc/"
cp "$modules"/axe-core/{axe.min.js,LICENSE} "$vendor/axe-core/"
echo "$want" > "$stamp"
