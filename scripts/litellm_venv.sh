#!/usr/bin/env bash
# LiteLLM's proxy in a virtualenv of its own (its pins clash with Airflow's), for the tests
# and benchmarks that put it behind or beside the router (docs/backends.md). Made once per
# pinned version under a cache directory outside the checkout, so a fresh clone (CI) reuses
# it; prints its path. Usage: export LLMR_LITELLM_VENV="$(bash scripts/litellm_venv.sh)"
set -euo pipefail
LITELLM_VERSION=1.80.0
CACHE="${LLMR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-llm-router}"
VENV="$CACHE/litellm-$LITELLM_VERSION"
mkdir -p "$CACHE"
# two first runs at once (test workers, a benchmark beside the suite): the second waits for
# the first's install, then finds it complete, instead of removing it mid-install
exec 9>"$VENV.lock"
flock 9
if [ ! -f "$VENV/.complete" ]; then
  # a virtualenv cannot be moved (its scripts name its path), so it is made in place and
  # marked complete last: an interrupted install is removed and made again
  rm -rf "$VENV"
  if ! { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q --upgrade pip \
         && "$VENV/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION"; } >&2; then
    echo "error: could not install litellm[proxy]==$LITELLM_VERSION into $VENV" \
         "(pip's output is above)" >&2
    exit 2
  fi
  echo "$LITELLM_VERSION" > "$VENV/.complete"
fi
echo "$VENV"
