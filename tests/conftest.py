from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable
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


#: the markers of the tests that only the full run (``--all``: ``bash scripts/test.sh --all``, CI) runs
FULL_RUN_MARKERS = ("real", "launch", "slow")
#: the families whose ONNX export and quickstart run every day, one of each kind of attention code: BERT's
#: (which the RoBERTa, ELECTRA, DistilBERT, ALBERT... families share through transformers' attention interface),
#: DeBERTa-v2's and MPNet's own, ModernBERT's rotary, fused and sliding-window one, EuroBERT's grouped queries
EVERYDAY_FAMILIES = ("bert", "deberta-v2", "mpnet", "modernbert", "eurobert")


#: the families whose whole method chains (tasks, the GhostBERT chain twice, the ONNX export of every method) run
#: every day: BERT's attention code and ModernBERT's (rotary, fused Q/K/V, gated FFN); each family's adapter facts
#: are tested every day by the cheap per-family tests (gates, pruning, ghosts, grouped layers, references)
CHAIN_FAMILIES = ("bert", "modernbert")


def family_params(families, every_day=EVERYDAY_FAMILIES) -> list:
    """``families`` as parameters, those outside ``every_day`` marked ``slow`` (the full run's)."""
    return every_day_params(families, every_day)


def every_day_params(values, every_day) -> list:
    """``values`` as parameters, those outside ``every_day`` marked ``slow``: the everyday run keeps one case of
    each kind, the full run (``--all``) all of them."""
    return [pytest.param(v, marks=() if v in every_day else pytest.mark.slow) for v in values]


def every_day_rows(rows, every_day) -> list:
    """A bad-input table's ``rows`` (each an id first, then its arguments) as parameters, those whose id is outside
    ``every_day`` marked ``slow``: the everyday run keeps one row of each way a fault is handled, the full run every
    row (the same handling met by another input)."""
    unknown = set(every_day) - {row[0] for row in rows}
    assert not unknown, f"no rows named {sorted(unknown)}"
    return [pytest.param(*row, id=row[0], marks=() if row[0] in every_day else pytest.mark.slow) for row in rows]


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", dest="full_run",
                     help=f"the full suite: also the tests marked {', '.join(FULL_RUN_MARKERS)} (real-model chains, "
                          "multi-process launches, the rest of per-family matrices), which the everyday run leaves out")


def _everyday(config) -> bool:
    """The everyday run: neither --all nor a -m expression of one's own (which selects by itself)."""
    return not config.getoption("full_run") and not config.getoption("markexpr")


def pytest_collection_modifyitems(config, items):
    if _everyday(config):
        full_only = [item for item in items if any(item.get_closest_marker(m) for m in FULL_RUN_MARKERS)]
        if full_only:
            config.hook.pytest_deselected(items=full_only)
            items[:] = [item for item in items if not any(item.get_closest_marker(m) for m in FULL_RUN_MARKERS)]
    items[:] = longest_first(items, _durations())


#: the seconds each slow test took in a recent run (scripts/test_durations.py writes it)
DURATIONS = Path(__file__).with_name("durations.json")
#: the built-once fixture a test may wait for while another worker builds it (about 100 s), and how many seconds
#: of other long tests come before a second test that needs it
SHARED_BUILD, SHARED_BUILD_SECONDS = "sst2_teacher", 150.0


def _durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` by test module, the modules with the most known-slow seconds first, each module's tests together
    and in their order (its module fixtures are built once per worker): the workers (``-n 2 --maxschedchunk 1``,
    scripts/test.sh) take the next test as each finishes, so they end together instead of one running the last
    long test alone. The first module that needs the built-once fixture :data:`SHARED_BUILD` starts first; the
    others wait until :data:`SHARED_BUILD_SECONDS` of other slow tests come before them (else a worker would sit
    idle while the other builds it)."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    work = {m: sum(seconds.get(i.nodeid, 0.0) for i in tests) for m, tests in modules.items()}
    ranked = sorted(modules, key=lambda m: -work[m])  # stable: modules of no known-slow test keep their order

    def needs_build(module: str) -> bool:
        return any(SHARED_BUILD in getattr(i, "fixturenames", ()) for i in modules[module])

    builders = [m for m in ranked if needs_build(m)]
    ordered, waiting, meanwhile = builders[:1], builders[1:], 0.0  # the first to need it starts at once
    for module in ranked:
        if module in builders:
            continue
        ordered.append(module)
        meanwhile += work[module]
        if waiting and meanwhile >= SHARED_BUILD_SECONDS:
            ordered += waiting
            waiting = []
    return [item for module in ordered + waiting for item in modules[module]]


def pytest_report_header(config):
    if _everyday(config):
        return (f"everyday run: tests marked {' or '.join(FULL_RUN_MARKERS)} are deselected "
                "(the full suite: bash scripts/test.sh --all)")
    return None


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
    in only. tests/test_deployments.py times every deployment, and fakes the timings of compress's report.
    compress's default ``--runtime auto`` would time the dense model in every deployment first: here it takes the
    deployment listed first (test_deployments.py checks the choice by timing)."""
    monkeypatch.setattr("ghostify.recipe.compress_timing.installed_deployments", lambda: ())
    monkeypatch.setattr("ghostify.recipe.compress_timing.chosen_deployment", _first_listed_deployment)
    yield


def _first_listed_deployment(model, deployment, **_):
    """``--runtime auto`` resolved without timing: the deployment listed first (``DEFAULT_DEPLOYMENT``)."""
    from ghostify.runtimes import AUTO, DEFAULT_DEPLOYMENT

    return deployment if deployment.runtime != AUTO else dataclasses.replace(deployment, runtime=DEFAULT_DEPLOYMENT)


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


@pytest.fixture
def without_load_check(monkeypatch):
    """``export --format hf`` without its check in a fresh Python (about 7 s of CPU per export: a
    process that imports torch and transformers), for tests whose subject is what the export writes
    beside the weights (the card, the record, a warning) or what it refuses; that every family's
    export loads and computes the same without ghostify is tests/test_export.py's."""
    import importlib

    export_step = importlib.import_module("ghostify.steps.export")  # the module: steps.export is the function
    monkeypatch.setattr(export_step, "check_hf", lambda *args, **kwargs: 0.0)


def run_process(command: list[str], *, timeout: float, **options) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True, **options)`` that fails the test after
    ``timeout`` seconds instead of hanging: at the deadline the command and every process it started
    are killed (``accelerate launch``'s ranks run in sessions of their own, out of reach of a signal
    to its process group)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(process.pid)
        out, err = process.communicate()
        pytest.fail(f"{' '.join(map(str, command[:6]))} ... did not finish in {timeout:g} s (a hang?); "
                    f"its last output:\n{err[-3000:]}")
    finally:
        if process.poll() is None:  # the test itself was interrupted
            _kill_tree(process.pid)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and all of its descendants (found before any is killed: an orphan's parent changes)."""
    import psutil  # accelerate's dependency

    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for process in [*root.children(recursive=True), root]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def benchmark_module(name: str):
    """``benchmarks/NAME.py`` imported as the module ``name`` (the benchmarks are scripts, no package; their own
    directory on ``sys.path`` for the ``common`` they import)."""
    import importlib.util
    import sys

    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from ghostify.cli.app import main

    capsys.readouterr()  # drop what the test printed before (transformers' save progress bars)
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="session")
def sst2_epoch_check(glue, tmp_path_factory) -> Path:
    """128 rows of SST-2 validation (a seeded sample), the `--validation-file` of the real-model chains'
    training: their one epoch leaves the evaluation after it nothing to choose, and the full 872 rows
    would cost each training command about 15 s. Each chain's own `eval` reads all 872."""
    import pandas as pd

    out = _shared_root(tmp_path_factory) / "sst2-validation-128.csv"
    with held_lock(out.with_suffix(".lock")):
        if not out.is_file():
            rows = pd.read_parquet(next((glue / "sst2").glob("validation-*.parquet")))
            tmp = out.with_suffix(".tmp")
            rows.sample(n=128, random_state=0).to_csv(tmp, index=False)
            tmp.replace(out)
    return out


@pytest.fixture(scope="session")
def sst2_teacher(minilm, glue, sst2_epoch_check, tmp_path_factory) -> Path:
    """MiniLM fine-tuned on 2,000 SST-2 training examples for one epoch (0.8016 validation accuracy on
    all 872 rows), built once per test run (the workers share it) for the real-model method chains."""
    from ghostify.steps import finetune

    out = _shared_root(tmp_path_factory) / "sst2-teacher"
    with held_lock(out.with_suffix(".lock")):  # the other worker waits, then reads it (finetune writes atomically)
        if not out.is_dir():
            finetune(minilm, out, task="sst2", dataset=str(glue), max_samples=2000, epochs=1, learning_rate=1e-4,
                     validation_file=str(sst2_epoch_check))
    return out


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """``build(directory)`` once per test run, in the run's directory that both xdist workers see: the
    first worker to need it builds it, the other waits, then reads it (tests only read such a fixture).
    A build that failed leaves no mark of completion, so the next caller builds it again."""
    root = _shared_root(tmp_path_factory)
    directory, done = root / name, root / f"{name}.built"
    with held_lock(root / f"{name}.lock"):
        if not done.is_file():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            done.touch()
    return directory


def _shared_root(tmp_path_factory) -> Path:
    """The run's temporary directory all xdist workers see (each worker's own is one level down)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


