#!/usr/bin/env bash
# Install what the tests need (scripts/env.sh) and run them: python -m pytest -q -n 2 [ARGS...]
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/test_kill.py` or `scripts/test.sh -n 0 -x`.
# The everyday run leaves out the tests marked `real` (the real MiniLM and GLUE) and `launch` (several
# processes under accelerate launch); `scripts/test.sh --all` runs them too, as CI does (.ci/run).
set -euo pipefail
# shellcheck source=scripts/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ghostify_env
cd "$REPO"
python -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__)"
# --maxschedchunk 1: each worker takes the next test as it finishes (the conftest orders the longest first)
exec python -m pytest -q -n 2 --maxschedchunk 1 --durations=20 "$@"  # the slowest tests, to keep CI short
