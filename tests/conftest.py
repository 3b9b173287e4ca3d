from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ghostify.files import held_lock
from ghostify.testing import FAMILIES

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GHOSTIFY_SHARED", REPO.parent / "shared"))
MINILM = SHARED / "models" / "all-MiniLM-L6-v2"
GLUE = SHARED / "data" / "glue"

ALL_FAMILIES = list(FAMILIES)
HEADS = ["base", "sequence-classification", "token-classification", "question-answering", "masked-lm"]
#: families whose attention goes through transformers' attention interface (eager and SDPA)
SDPA_FAMILIES = ["bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "albert",
                 "roberta-prelayernorm", "xlm-roberta-xl", "modernbert", "eurobert", "gte", "nomic_bert",
                 "jina_embeddings_v3"]
#: the families of issue 13 (fused Q/K/V, gated FFNs, grouped-query attention, RoPE, pre-norm)
NEW_FAMILIES = ["roberta-prelayernorm", "xlm-roberta-xl", "modernbert", "eurobert", "gte", "nomic_bert",
                "jina_embeddings_v3"]


@pytest.fixture(autouse=True, scope="session")
def _own_cache(tmp_path_factory):
    """ghostify's cache (latency models) in the session's temporary directory, never the home directory;
    tests that check the cache itself set their own."""
    previous = os.environ.get("GHOSTIFY_CACHE")
    # one cache for the workers of a run: a tiny model's latency model (about a minute of probes) is measured
    # once, the other worker waits for it
    cache = _shared_root(tmp_path_factory) / "ghostify-cache"
    cache.mkdir(exist_ok=True)
    os.environ["GHOSTIFY_CACHE"] = str(cache)
    yield
    if previous is None:
        os.environ.pop("GHOSTIFY_CACHE", None)
    else:
        os.environ["GHOSTIFY_CACHE"] = previous


if os.environ.get("PYTEST_XDIST_WORKER"):
    # one intra-op thread per test process: -n 2 workers with 2 threads each oversubscribe 2 cores
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _compress_times_its_own_deployment_only(monkeypatch):
    """compress ends by timing the dense model in every installed deployment, exporting it to each runtime (30-45 s
    for a tiny model on this project's 2-core machines): the tests time the dense model in the deployment they ship
    in only. tests/test_deployments.py times every deployment, and fakes the timings of compress's report."""
    monkeypatch.setattr("ghostify.recipe.compress_timing.installed_deployments", lambda: ())
    yield


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def minilm() -> Path:
    if not MINILM.is_dir():
        pytest.skip(f"real model not found at {MINILM}")
    return MINILM


@pytest.fixture(scope="session")
def glue() -> Path:
    if not GLUE.is_dir():
        pytest.skip(f"GLUE data not found at {GLUE}")
    return GLUE


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from ghostify.cli.app import main

    capsys.readouterr()  # drop what the test printed before (transformers' save progress bars)
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="session")
def sst2_teacher(minilm, glue, tmp_path_factory) -> Path:
    """MiniLM fine-tuned on 2,000 SST-2 training examples for one epoch (about 0.8 validation
    accuracy), built once per test run (the workers share it) for the real-model method chains."""
    from ghostify.steps import finetune

    out = _shared_root(tmp_path_factory) / "sst2-teacher"
    with held_lock(out.with_suffix(".lock")):  # the other worker waits, then reads it (finetune writes atomically)
        if not out.is_dir():
            finetune(minilm, out, task="sst2", dataset=str(glue), max_samples=2000, epochs=1, learning_rate=1e-4)
    return out


def _shared_root(tmp_path_factory) -> Path:
    """The run's temporary directory all xdist workers see (each worker's own is one level down)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


