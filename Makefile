# Thin wrappers over scripts/ (which need only bash): each creates or reuses .venv first.
#   make quickstart [ARGS="--set vars.samples=500"]    make test [ARGS="tests/test_kill.py"]
.PHONY: setup quickstart test

setup:
	bash -c '. scripts/env.sh && ghostify_env'

quickstart:
	bash scripts/quickstart.sh $(ARGS)

test:
	bash scripts/test.sh $(ARGS)
