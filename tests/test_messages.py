"""Issue 24, messages that send the user the right way: info on an ONNX export, eval's task from
the checkpoint's history, an unreachable hub in one fast line, label-free importance on a bare
encoder, a failed stage's exit code, a stage left out by `when: false`."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ghostify.steps import export, importance
from ghostify.testing import tiny_model, tiny_tokenizer

from .conftest import REPO, built_once, run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401


@pytest.fixture(scope="session")
def extra(world, tmp_path_factory) -> Path:  # noqa: F811
    def build(root: Path) -> None:
        export(world / "m", root / "onnx", format="onnx")
        importance(world / "m", root / "scored", dataset=str(world / "toy"), text_columns=("sentence",),
                   label_column="label", samples=8, max_length=32)
        tiny_model("bert", "base").save_pretrained(str(root / "bare"))
        tiny_tokenizer(root / "bare")
        (root / "fails.yaml").write_text(f"model: {world / 'm'}\ndata: {{dataset: {world / 'toy'}, text_columns: "
                                         "[sentence], label_column: label, max_length: 32}\nstages:\n  - prune: "
                                         "{width: 0.5}\n  - attach-ghost: {when: false}\n  - eval: {split: nope}\n")
    return built_once(tmp_path_factory, "messages", build)


CASES = [
    ("info-onnx-export", ["info", "{x}/onnx"], "is an ONNX export (model.onnx), which info cannot read: `ghostify eval"),
    ("info-onnx-file", ["info", "{x}/onnx/model.onnx"], "`ghostify bench"),
    ("eval-no-task-no-history", ["eval", "{m}", "--dataset", "{toy}"], "task"),
]


@pytest.mark.parametrize("case_id, args, expected", CASES, ids=[c[0] for c in CASES])
def test_refusals_point_the_right_way(case_id, args, expected, world, extra, capsys, tmp_path):  # noqa: F811
    args = [a.replace("{x}", str(extra)) for a in args]
    _check_refused(capsys, world, tmp_path / "out", _fill(args, world, tmp_path / "out"), expected, inputs=(extra,))


def test_eval_takes_task_and_dataset_from_the_history(extra, glue, capsys, tmp_path):
    import json
    import shutil

    model = shutil.copytree(extra / "scored", tmp_path / "scored")
    config = json.loads((model / "config.json").read_text())
    config["ghostify"]["history"][-1]["arguments"].update(task="sst2", dataset=str(glue))  # as an SST-2 run records it
    (model / "config.json").write_text(json.dumps(config))
    code, out, err = run_cli(capsys, "eval", model, "--max-length", "32", "--max-samples", "16")
    assert code == 0, err
    assert f"eval: task sst2 on {glue}, from the history of {model}" in err and out.startswith("sst2 validation (16 samples)")


def test_an_unreachable_hub_is_one_fast_line():
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    env.pop("HF_HUB_OFFLINE", None)
    code = ("import time, ghostify.cli, ghostify.steps, transformers\nfrom ghostify.cli.app import main\n"
            "t = time.perf_counter(); c = main(['info', 'org/name']); print('took', time.perf_counter() - t, 'exit', c)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    lines = done.stderr.strip().splitlines()
    assert lines == ["error: cannot reach the Hugging Face hub (http://127.0.0.1:9) for 'org/name': no network "
                     "connection; pass a local directory, or set HF_HUB_OFFLINE=1 to use the cache"], done.stderr
    took = float(done.stdout.split()[1])
    assert took < 10 and done.stdout.split()[-1] == "2"


def test_label_free_importance_on_a_bare_encoder_gives_no_random_head_warning(extra, world, tmp_path):  # noqa: F811
    data = dict(dataset=str(world / "toy"), text_columns=("sentence",), label_column="label", samples=8, max_length=32)
    with pytest.warns(UserWarning, match="randomly initialised.*--label-free"):
        importance(extra / "bare", tmp_path / "labels", **data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importance(extra / "bare", tmp_path / "label-free", label_free=True, **data)


def test_a_failed_stage_exits_1_and_a_left_out_stage_is_named(extra, capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", extra / "fails.yaml", "-o", tmp_path / "run", "--dry-run")
    assert code == 0 and "stage 02-attach-ghost left out (when: false)" in out
    code, out, err = run_cli(capsys, "run", extra / "fails.yaml", "-o", tmp_path / "run")
    assert code == 1 and "stage 02-attach-ghost left out (when: false)" in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == \
        [line for line in err.splitlines() if line.startswith("error: stage 03-eval failed: ")]
    assert "Traceback" not in err


def test_an_output_that_is_a_file_says_so_at_once(world, tmp_path, capsys):  # noqa: F811
    """Issue 39: first "pass --overwrite", then with it "exists and is a file"; the second is said at once."""
    from ghostify import steps
    from ghostify.errors import GhostifyError

    (tmp_path / "a-file").write_text("")
    for extra in ([], ["--overwrite"]):
        code, _, err = run_cli(capsys, "prune", world / "m", "-o", tmp_path / "a-file", "--width", "0.5", *extra)
        assert code == 2 and "exists and is a file; choose another -o" in err and "--overwrite" not in err, err
    with pytest.raises(GhostifyError, match="exists and is a file; choose another -o"):  # the library says the same
        steps.prune(world / "m", tmp_path / "a-file", width=0.5)
    assert (tmp_path / "a-file").read_text() == ""
