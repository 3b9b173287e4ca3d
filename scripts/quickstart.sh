#!/usr/bin/env bash
# Install what ghostify needs (scripts/env.sh) and run the quickstart recipe:
#   ghostify run recipes/quickstart.yaml -o runs/quick [ARGS...]
# It names its model and data on the Hugging Face hub. When the hub cannot be reached (or
# HF_HUB_OFFLINE=1), the local copies in ../shared (GHOSTIFY_SHARED=/path overrides) are used instead.
# Extra arguments go to `ghostify run`, e.g. `-o runs/other` or `--set vars.samples=500`.
set -euo pipefail
# shellcheck source=scripts/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ghostify_env
cd "$REPO"

RECIPE=recipes/quickstart.yaml
SHARED="${GHOSTIFY_SHARED:-$REPO/../shared}"
MODEL="$SHARED/models/all-MiniLM-L6-v2"
DATA="$SHARED/data/glue"

output=(-o runs/quick)
for arg in "$@"; do
    case "$arg" in -o|--output|--output=*) output=() ;; esac
done

# Is the hub reachable? Offline when told so; otherwise one request, given up after 5 seconds
# (a watchdog thread also bounds a hanging name lookup, which socket timeouts do not cover).
hub_reachable() {
    case "$(printf '%s' "${HF_HUB_OFFLINE:-${TRANSFORMERS_OFFLINE:-}}" | tr '[:upper:]' '[:lower:]')" in
        1|true|yes|on) return 1 ;;
    esac
    python - <<'PY'
import os, threading, urllib.error, urllib.request

endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
result = []

def probe():
    request = urllib.request.Request(endpoint + "/api/models/sentence-transformers/all-MiniLM-L6-v2", method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=5).close()
        result.append(True)
    except urllib.error.HTTPError as exc:  # the hub answered
        result.append(exc.code < 500)
    except Exception:
        result.append(False)

thread = threading.Thread(target=probe, daemon=True)
thread.start()
thread.join(6)
os._exit(0 if result and result[0] else 1)
PY
}

overrides=()
if hub_reachable; then
    echo "quickstart: using sentence-transformers/all-MiniLM-L6-v2 and nyu-mll/glue from the Hugging Face hub" >&2
elif [ -d "$MODEL" ] && [ -d "$DATA" ]; then
    SHARED="$(cd "$SHARED" && pwd)"
    echo "quickstart: the Hugging Face hub is not reachable; using the local copies in $SHARED (models/all-MiniLM-L6-v2, data/glue)" >&2
    overrides=(--set "model=$SHARED/models/all-MiniLM-L6-v2" --set "data.dataset=$SHARED/data/glue")
    export HF_HUB_OFFLINE=1  # no retries against an unreachable hub
else
    echo "error: the Hugging Face hub is not reachable and there are no local copies at $MODEL and $DATA; connect to the hub or set GHOSTIFY_SHARED=/path/to/shared" >&2
    exit 2
fi

command=(ghostify run "$RECIPE" ${output[@]+"${output[@]}"} ${overrides[@]+"${overrides[@]}"} "$@")
echo "+ ${command[*]}" >&2
"${command[@]}"
