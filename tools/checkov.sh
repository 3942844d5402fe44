#!/usr/bin/env bash
# Static security scan of the Terraform in infra/ with checkov, from a venv of its own.
#
#   tools/checkov.sh            scan infra/ (exit non-zero on any failed check)
#   tools/checkov.sh ARGS...    extra checkov arguments, e.g. --check CKV_GCP_62
#
# checkov pins its dependencies tightly, so it lives in .venv-checkov (git-ignored), never in
# the project's .venv. A stamp named after the pinned version makes a second run skip pip.
# Skips are allowed only inline (#checkov:skip=CKV_...:reason) and are listed with their
# reason in infra/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

CHECKOV_VERSION="3.3.30"
VENV=".venv-checkov"
STAMP="$VENV/.installed-checkov-$CHECKOV_VERSION"

command -v python3 >/dev/null 2>&1 || { echo "checkov.sh: python3 is required" >&2; exit 2; }
if [ ! -f "$STAMP" ]; then
  echo "checkov.sh: installing checkov $CHECKOV_VERSION into $VENV (log: $VENV/install.log)..."
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip \
         && "$VENV/bin/python" -m pip install "checkov==$CHECKOV_VERSION"; } >"$VENV/install.log" 2>&1; then
    tail -n 40 "$VENV/install.log" >&2
    echo "checkov.sh: install failed; see $VENV/install.log" >&2
    exit 1
  fi
  touch "$STAMP"
fi

# --quiet prints failed checks only; --compact leaves out the code blocks; --skip-download
# keeps the scan offline (no guideline download from the vendor). checkov exits 1 when a
# check fails; a file it cannot parse it only counts, so that fails here too (a file that
# does not parse is a file nothing scanned).
set +e
report=$("$VENV/bin/checkov" -d infra --framework terraform --quiet --compact --skip-download "$@" 2>&1)
rc=$?
set -e
printf '%s\n' "$report"
if printf '%s\n' "$report" | grep -Eq 'Parsing errors: [1-9]'; then
  echo "checkov.sh: checkov could not parse some files of infra/" >&2
  exit 1
fi
exit "$rc"
