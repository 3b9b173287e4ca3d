"""Sharded training on 2 CPU processes: ``accelerate launch --config_file recipes/accelerate/...``
with FSDP2 and with DeepSpeed ZeRO-3 runs finetune, distill and a recipe; the checkpoint holds the
gathered weights (those of the same run under data parallelism), a killed run resumes to the bytes of
an uninterrupted one, a process whose view of the file system differs from the main one's still
ends with the others, and the inputs are never touched. The launches are marked ``launch``: the full
suite runs them (``bash scripts/test.sh --all``); each fails after ``LAUNCH_TIMEOUT`` s instead of hanging.

On a machine without CUDA Accelerate shards only with ``GHOSTIFY_SHARDED_CPU=1`` (the documented
setting; ghostify/training/sharding.py), which these launches set. DeepSpeed compiles a small C++
extension on its first use (a few minutes, then cached under ~/.cache/torch_extensions); its tests
are skipped where DeepSpeed is not installed (``pip install 'ghostify[distributed]'``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ghostify.errors import GhostifyError
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .conftest import run_cli, run_process

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "recipes" / "accelerate"
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
ENGINES = {
    "fsdp2": ("fsdp2-cpu.yaml", "FSDP2"),
    "zero3": ("zero3-cpu.yaml", "DeepSpeed ZeRO-3"),
}
DEEPSPEED = pytest.mark.skipif(not HAS_DEEPSPEED,
                               reason="DeepSpeed is not installed: pip install 'ghostify[distributed]'")
ENGINE_PARAMS = [pytest.param("fsdp2"), pytest.param("zero3", marks=[DEEPSPEED, pytest.mark.compiler])]
#: seconds a launch may take (a tiny model's run takes well under a minute): a hang fails its test
LAUNCH_TIMEOUT = 300
# 64 examples, batch 16, 2 epochs: 8 steps, a saved state every 2
TRAIN = ["--text-columns", "sentence", "--epochs", "2", "--batch-size", "16", "--learning-rate", "3e-3",
         "--checkpoint-steps", "2", "--max-length", "32"]

# Run as the launched program in place of `-m ghostify`: every process stops at the same optimizer
# step, as a run killed between two saved states (the state of the last save stays on disk).
CRASH = """
import sys
from torch.optim.optimizer import register_optimizer_step_pre_hook

at, steps = int(sys.argv.pop(1)), [0]

def stop(optimizer, args, kwargs):
    steps[0] += 1
    if steps[0] == at:
        raise SystemExit(3)

register_optimizer_step_pre_hook(stop)
from ghostify.cli import run
sys.argv[0] = "ghostify"
run()
"""


def _launch(args: list[str], cwd: Path, engine: str | Path | None,
            program: list[str] | None = None) -> subprocess.CompletedProcess:
    """``accelerate launch`` of ``ghostify ARGS`` on 2 CPU processes: under ``engine``'s config (or the config
    file ``engine``), or data parallel (``--multi_gpu``) for None."""
    launch = [sys.executable, "-m", "accelerate.commands.launch"]
    if engine is None:
        launch += ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                   "--dynamo_backend", "no"]
    else:
        launch += ["--config_file", str(engine if isinstance(engine, Path) else CONFIGS / ENGINES[engine][0])]
    env = dict(os.environ, OMP_NUM_THREADS="1", GHOSTIFY_DEBUG="", GHOSTIFY_SHARDED_CPU="1")
    command = [*launch, "--main_process_port", "0", *(program or ["-m", "ghostify"]), *args]
    return run_process(command, cwd=cwd, env=env, timeout=LAUNCH_TIMEOUT)


def _ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-4000:]


def _digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A tiny student, a teacher fine-tuned from it, toy data; and their digests, checked unchanged."""
    from ghostify.steps import finetune

    root = tmp_path_factory.mktemp("sharded")
    tiny_checkpoint(root / "init")
    data = write_toy_dataset(root / "data", train=64, validation=32)
    finetune(root / "init", root / "teacher", dataset=str(data), text_columns=("sentence",), label_column="label",
             epochs=1, batch_size=16, learning_rate=3e-3)
    paths = {"root": root, "init": root / "init", "teacher": root / "teacher", "data": Path(data)}
    before = {name: _digest(paths[name]) for name in ("init", "teacher", "data")}
    yield paths
    assert {name: _digest(paths[name]) for name in before} == before  # inputs untouched by every launch


def _commands(inputs: dict[str, Path], out: Path) -> dict[str, list[str]]:
    data = ["--dataset", str(inputs["data"]), *TRAIN]
    return {
        "finetune": ["finetune", str(inputs["init"]), "-o", str(out / "finetune"), *data],
        # the logits too: with hidden states and attention alone the task head gets no gradient, and
        # would be compared untrained
        "distill": ["distill", "--teacher", str(inputs["teacher"]), "--student", str(inputs["init"]),
                    "-o", str(out / "distill"), "--logit-weight", "1", *data],
    }


@pytest.fixture(scope="module")
def data_parallel(inputs) -> Path:
    """finetune and distill under data parallelism: the weights sharding must reproduce."""
    out = inputs["root"] / "ddp"
    for args in _commands(inputs, out).values():
        _ok(_launch(args, inputs["root"], None))
    return out


# Run as the launched program in place of `-m ghostify`: in every process but the main one, the file
# system shows no OUT.partial/best, as when the main process has already moved it into the output and
# removed OUT.partial (the race that hung a run at its end: the other process then entered a gather of
# the weights that the main one never joined).
BEST_ALREADY_GONE = """
import os, pathlib, sys

if os.environ["RANK"] != "0":
    is_dir = pathlib.Path.is_dir
    pathlib.Path.is_dir = lambda self, *args, **kwargs: self.name != "best" and is_dir(self, *args, **kwargs)
from ghostify.cli import run
sys.argv[0] = "ghostify"
run()
"""


@pytest.fixture(scope="module", params=ENGINE_PARAMS)
def sharded(request, inputs) -> tuple[str, Path]:
    """finetune and distill under the engine's config (one module-wide run each); finetune as
    ``BEST_ALREADY_GONE``, so that a process deciding a collective on its own would hang it."""
    engine = request.param
    out = inputs["root"] / engine
    program = inputs["root"] / "best_already_gone.py"
    program.write_text(BEST_ALREADY_GONE)
    for command, args in _commands(inputs, out).items():
        _ok(_launch(args, inputs["root"], engine, program=[str(program)] if command == "finetune" else None))
    return engine, out


@pytest.mark.launch
def test_a_process_whose_file_system_differs_ends_the_run_with_the_others(sharded):
    """The fixture's finetune ran with the other process finding no ``OUT.partial/best``: its end (the
    best checkpoint or a gather of the last weights) was decided for every process by the main one, so
    the run ended (a hang fails the fixture at LAUNCH_TIMEOUT) with the best evaluation's checkpoint;
    the next test finds its weights equal to data parallelism's."""
    engine, out = sharded
    training = json.loads((out / "finetune" / "training.json").read_text())
    assert training["engine"] == ENGINES[engine][1] and len(training["evaluations"]) == 2
    assert training["best"] == max(e["eval"]["accuracy"] for e in training["evaluations"])
    assert (out / "finetune" / "model.safetensors").is_file() and not (out / "finetune.partial").exists()


@pytest.mark.launch
@pytest.mark.parametrize("command", ["finetune", "distill"])
def test_sharded_run_saves_the_gathered_weights_of_the_data_parallel_run(sharded, data_parallel, inputs, command):
    engine, out = sharded
    training = json.loads((out / command / "training.json").read_text())
    assert training["engine"] == ENGINES[engine][1] and training["processes"] == 2 and training["steps"] == 8
    saved, reference, initial = (_weights(d) for d in (out / command, data_parallel / command, inputs["init"]))
    assert saved.keys() == reference.keys()
    # every tensor whole, in its dtype, trained: the same numbers as data parallelism (to rounding)
    for name, tensor in saved.items():
        assert tensor.shape == reference[name].shape and tensor.dtype == reference[name].dtype, name
        assert torch.allclose(tensor, reference[name], atol=1e-5, rtol=1e-4), name
    assert any(not torch.equal(saved[k], initial[k]) for k in saved)
    from ghostify import load_model

    model = load_model(out / command)  # reloads as a checkpoint of ghostify's format, with the same tensors
    assert all(torch.equal(model.state_dict()[k], saved[k]) for k in saved)
    assert not (out / f"{command}.partial").exists()


@pytest.mark.launch
def test_killed_sharded_run_resumes_to_the_bytes_of_an_uninterrupted_one(sharded, inputs, tmp_path):
    engine, out = sharded
    crash = tmp_path / "crash.py"
    crash.write_text(CRASH)
    args = _commands(inputs, tmp_path)["finetune"]
    stopped = _launch(["7", *args], inputs["root"], engine, program=[str(crash)])  # step 7: the state of step 6
    assert stopped.returncode != 0
    state = tmp_path / "finetune.partial" / "state"
    assert not (tmp_path / "finetune").exists()
    assert json.loads((state / "progress.json").read_text())["step"] == 6
    assert json.loads((state / "engine.json").read_text()) == {"engine": ENGINES[engine][1], "processes": 2}
    other = "zero3" if engine == "fsdp2" else "fsdp2"
    if other == "fsdp2" or HAS_DEEPSPEED:  # another engine's state is refused in one line, and kept
        refused = _launch([*args, "--resume"], inputs["root"], other)
        assert refused.returncode != 0 and f"saved by {ENGINES[engine][1]} on 2 processes" in refused.stderr
        assert state.is_dir()
    _ok(_launch([*args, "--resume"], inputs["root"], engine))
    assert (tmp_path / "finetune" / "model.safetensors").read_bytes() == \
        (out / "finetune" / "model.safetensors").read_bytes()
    assert not (tmp_path / "finetune.partial").exists()


# Two processes of one gloo group: each looks for `best` in a directory of its own (the main one's has
# it), refuses as itself, and answers its rank; every answer and refusal must be the main process's.
MAIN_DECIDES = """
import sys
from pathlib import Path

import torch.distributed as dist

from ghostify.errors import GhostifyError
from ghostify.training.sharding import on_main_process

rank, store, root = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
print(on_main_process(lambda: (root / f"rank{rank}" / "best").is_dir()))


def refuse():
    raise GhostifyError(f"refused by rank {rank}")


try:
    on_main_process(refuse)
except GhostifyError as exc:
    print(exc)
print(on_main_process(lambda: rank))
dist.destroy_process_group()
"""


def test_every_process_takes_the_main_process_answer_and_refusal(tmp_path):
    (tmp_path / "rank0" / "best").mkdir(parents=True)
    (tmp_path / "rank1").mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen([sys.executable, "-c", MAIN_DECIDES, str(rank), str(tmp_path / "store"), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              start_new_session=True) for rank in (0, 1)]
    try:
        done = [rank.communicate(timeout=120) for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                os.killpg(rank.pid, signal.SIGKILL)
                rank.wait()
    for rank, (stdout, stderr) in zip(ranks, done):
        assert rank.returncode == 0, stderr[-3000:]
        assert stdout.split("\n") == ["True", "refused by rank 0", "0", ""]


RECIPE = """
description: a recipe under a sharded launch
model: {init}
teacher: ${{teacher}}
data:
  dataset: {data}
  text_columns: [sentence]
  max_length: 32
seed: 0
stages:
  - finetune:
      output: teacher
      epochs: 1
      batch_size: 16
      learning_rate: 3.0e-3
  - importance:
      samples: 32
  - prune:
      width: 1/2
  - attach-ghost: {{}}
  - distill:
      epochs: 1
      batch_size: 16
      learning_rate: 3.0e-3
  - eval: {{}}
"""


@pytest.mark.launch
@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_recipe_runs_under_a_sharded_config(engine, inputs, tmp_path):
    """Training and evaluation on every process, sharded; importance, prune and attach-ghost on the main
    one: the pruned, ghosted student trains inside the wrap."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(init=inputs["init"], data=inputs["data"]))
    _ok(_launch(["run", str(recipe), "-o", str(tmp_path / "run")], tmp_path, engine))
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [row["status"] for row in report["stages"]] == ["ran"] * 6
    assert json.loads((tmp_path / "run" / "05-distill" / "training.json").read_text())["engine"] == ENGINES[engine][1]
    from ghostify import load_model

    student = load_model(tmp_path / "run" / "05-distill")
    pruned = load_model(tmp_path / "run" / "04-attach-ghost")
    assert student.state_dict().keys() == pruned.state_dict().keys()  # the ghosted, pruned structure kept
    assert any(not torch.equal(student.state_dict()[k], pruned.state_dict()[k]) for k in pruned.state_dict())
    assert json.loads((tmp_path / "run" / "06-eval" / "eval.json").read_text())["samples"] == 32


# ---- refusals under a launch: one line, once --------------------------------------------------------
@pytest.mark.launch
@pytest.mark.parametrize("case", ["fsdp1-config", "data-parallel-unknown-column"])
def test_a_refusal_under_a_launch_is_one_line_from_the_main_process(case, inputs, tmp_path):
    """Issue 48: an FSDP1 config under GHOSTIFY_SHARDED_CPU=1 was Accelerate's `unexpected RuntimeError: There are
    currently no available devices found` (the check came after Accelerate read the config), and every refusal was
    printed once per process, or as "terminated by SIGTERM" by a process the launcher stopped. Now the main process
    says it once; the others exit quietly with the same code."""
    args = _commands(inputs, tmp_path)["finetune"]
    if case == "fsdp1-config":
        engine: Path | None = tmp_path / "fsdp1.yaml"
        engine.write_text((CONFIGS / "fsdp2-cpu.yaml").read_text().replace("fsdp_version: 2", "fsdp_version: 1"))
        expected = "the launch config uses FSDP version 1; ghostify shards with FSDP2"
    else:
        engine = None
        args[args.index("--text-columns") + 1] = "sentense"  # read after the model, when the processes are up
        expected = "no column 'sentense'"
    result = _launch(args, tmp_path, engine)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0
    assert len(errors) == 1 and expected in errors[0], result.stderr[-4000:]
    assert "unexpected" not in result.stderr and "terminated by" not in result.stderr
    assert not (tmp_path / "finetune").exists() and not (tmp_path / "finetune.partial").exists()


# ---- refusals (in-process: no launch needed) --------------------------------------------------------


def test_a_sharded_config_on_the_cpu_without_the_setting_is_refused(monkeypatch):
    from ghostify.training.sharding import SHARDED_CPU, accelerator_options

    if torch.cuda.is_available():
        pytest.skip("the refusal is for machines without CUDA")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.delenv(SHARDED_CPU, raising=False)
    with pytest.raises(GhostifyError, match=f"set {SHARDED_CPU}=1"):
        accelerator_options()


@pytest.mark.parametrize("version", ["1", None], ids=["fsdp-version-1", "no-fsdp-version"])
def test_fsdp1_is_refused_before_accelerate_reads_the_config(version, monkeypatch):
    """Read from the launch's environment before any Accelerate state is built (where none is named, Accelerate's
    default is FSDP1)."""
    from ghostify.training.sharding import SHARDED_CPU, accelerator_options

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv(SHARDED_CPU, "0" if torch.cuda.is_available() else "1")
    if version is None:
        monkeypatch.delenv("FSDP_VERSION", raising=False)
    else:
        monkeypatch.setenv("FSDP_VERSION", version)
    with pytest.raises(GhostifyError, match="the launch config uses FSDP version 1; ghostify shards with FSDP2"):
        accelerator_options()


def test_importance_under_a_multi_process_launch_is_refused_in_one_line(inputs, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, _, err = run_cli(capsys, "importance", inputs["init"], "-o", tmp_path / "scored", "--dataset",
                           inputs["data"], "--text-columns", "sentence")
    assert code != 0 and "importance runs as one process (2 were launched)" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "scored").exists()
    # every command that writes one output from one copy of the model: prune, export, ...
    for command in (["prune", inputs["init"], "-o", tmp_path / "pruned", "--width", "0.5"],
                    ["export", inputs["init"], "-o", tmp_path / "exported"]):
        code, _, err = run_cli(capsys, *command)
        assert code != 0 and f"{command[0]} runs as one process (2 were launched)" in err, err
        assert len(err.strip().splitlines()) == 1 and not command[3].exists()


def test_every_accelerate_config_loads_and_shards_as_ghostify_needs():
    from accelerate.commands.config.config_args import load_config_from_file

    configs = sorted(CONFIGS.glob("*.yaml"))
    assert {p.stem for p in configs} >= {"ddp-1node", "fsdp2-1node", "zero3-1node", "fsdp2-multinode",
                                         "zero3-multinode", "fsdp2-cpu", "zero3-cpu"}
    for path in configs:
        config = load_config_from_file(str(path))
        if config.fsdp_config:  # the settings ghostify refuses otherwise
            assert config.fsdp_config["fsdp_version"] == 2, path.name
            assert not config.fsdp_config["fsdp_activation_checkpointing"], path.name
            assert not config.fsdp_config["fsdp_cpu_ram_efficient_loading"], path.name
        if config.deepspeed_config:
            assert config.deepspeed_config["zero_stage"] == 3 and not config.deepspeed_config["zero3_init_flag"]


def test_the_cpu_setting_is_refused_on_a_machine_with_cuda(monkeypatch):
    from ghostify.training.sharding import SHARDED_CPU, accelerator_options

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv(SHARDED_CPU, "1")
    with pytest.raises(GhostifyError, match=f"unset {SHARDED_CPU}"):
        accelerator_options()


@pytest.mark.launch
def test_data_parallel_distill_with_the_default_losses_leaves_the_untouched_head_alone(inputs, tmp_path):
    """The hidden-state losses never reach the task head: data parallelism must not wait for its gradient."""
    args = ["distill", "--teacher", str(inputs["teacher"]), "--student", str(inputs["init"]), "-o",
            str(tmp_path / "d"), "--dataset", str(inputs["data"]), *TRAIN]
    _ok(_launch(args, tmp_path, None))
    saved, initial = _weights(tmp_path / "d"), _weights(inputs["init"])
    head = [k for k in saved if k.startswith("classifier.")]
    assert head and all(torch.equal(saved[k], initial[k]) for k in head)
    assert any(not torch.equal(saved[k], initial[k]) for k in saved if k.startswith("bert.encoder."))
