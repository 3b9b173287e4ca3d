# shellcheck shell=bash
# Sourced by scripts/quickstart.sh and scripts/test.sh: create or reuse a virtual environment with
# CPU torch and ghostify (editable, with its test extras), then activate it.
#
#   GHOSTIFY_VENV    where the environment lives (default: .venv in the repository)
#   GHOSTIFY_TORCH   the pip arguments that install torch (default: torch==2.13.0, the CPU build on
#                    this project's machines). GPU or other platforms, e.g.
#                    GHOSTIFY_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
#   PYTHON           the interpreter that creates the environment (default: python3; 3.10 or newer)
#
# pip runs only when the environment is new or pyproject.toml / the torch spec changed since the
# last install (a stamp file in the environment), so a second call starts at once.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GHOSTIFY_VENV:-$REPO/.venv}"
TORCH_SPEC="${GHOSTIFY_TORCH:-torch==2.13.0}"
STAMP="$VENV/.ghostify-install"

say() { printf '%s\n' "$*" >&2; }

_ghostify_stamp() {
    # what the installed packages depend on: the project's requirements and the torch spec
    { cat "$REPO/pyproject.toml"; printf '%s\n' "$TORCH_SPEC"; } | "$VENV/bin/python" -c \
        'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
}

_ghostify_installed() {
    # the packages are there and `ghostify` is this checkout (without importing torch: fast)
    python - "$REPO" <<'PY' 2>/dev/null
import importlib.util, os, sys
specs = [importlib.util.find_spec(m) for m in ("torch", "transformers", "pytest", "xdist", "ghostify")]
ok = all(specs) and os.path.realpath(specs[-1].origin).startswith(os.path.realpath(sys.argv[1]) + os.sep)
sys.exit(0 if ok else 1)
PY
}

ghostify_env() {
    local python="${PYTHON:-python3}"
    if [ ! -x "$VENV/bin/python" ]; then
        if ! command -v "$python" >/dev/null 2>&1; then
            say "error: $python not found; install Python 3.10 or newer (or set PYTHON=/path/to/python3)"
            return 1
        fi
        if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
            say "error: ghostify needs Python 3.10 or newer; $python is $("$python" -V 2>&1)"
            return 1
        fi
        say "creating the virtual environment $VENV"
        if ! "$python" -m venv "$VENV"; then
            say "error: could not create $VENV (on Debian/Ubuntu: apt-get install python3-venv)"
            rm -rf "$VENV"
            return 1
        fi
        "$VENV/bin/python" -m pip install --quiet --upgrade pip || say "warning: could not upgrade pip; going on with $("$VENV/bin/python" -m pip --version)"
    fi
    # shellcheck disable=SC1091
    . "$VENV/bin/activate"
    local want
    want="$(_ghostify_stamp)"
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && _ghostify_installed; then
        return 0  # installed for this pyproject.toml and torch spec
    fi
    say "installing torch ($TORCH_SPEC) and ghostify into $VENV"
    # torch first: a bare `torch` requirement (ghostify's) would pull the CUDA build and its packages
    # shellcheck disable=SC2086  # GHOSTIFY_TORCH may hold several pip arguments
    python -m pip install --quiet $TORCH_SPEC
    python -m pip install --quiet -e "$REPO[test]"
    printf '%s\n' "$want" > "$STAMP"
}
