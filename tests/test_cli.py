"""The command line: help with examples, info figures, and one-line errors with non-zero exits."""

from __future__ import annotations

import json

import pytest

from ghostify.testing import tiny_model

from .conftest import run_cli

COMMANDS = ["importance", "prune", "info"]


def _single_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_examples(command, capsys):
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0
    assert "Examples" in out and f"ghostify {command}" in out


def test_top_level_help_lists_the_commands(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and all(c in out for c in COMMANDS)


@pytest.fixture
def tiny_dir(tmp_path):
    model = tiny_model("bert", "sequence-classification")
    model.save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


def test_info_json_has_the_documented_keys(tiny_dir, capsys):
    code, out, _ = run_cli(capsys, "info", tiny_dir, "--json")
    assert code == 0
    data = json.loads(out)
    assert {"params", "flops", "heads_per_layer", "ffn_per_layer", "encoder_params", "ghost", "history"} <= set(data)
    assert data["heads_per_layer"] == [4, 4] and data["ffn_per_layer"] == [37, 37]


def test_prune_without_scores_warns_and_uses_magnitude(tiny_dir, tmp_path, capsys):
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tmp_path / "p", "--width", "2/4")
    assert code == 0, err
    assert "weight magnitude" in err
    code, out, _ = run_cli(capsys, "info", tmp_path / "p", "--json")
    data = json.loads(out)
    assert data["heads_per_layer"] == [2, 2] and data["ffn_per_layer"] == [19, 19]
    assert [h["command"] for h in data["history"]] == ["prune"]
    assert {"ghostify", "transformers", "torch"} <= set(data["history"][0]["versions"])


def test_separate_head_and_ffn_widths_and_global_allocation(tiny_dir, tmp_path, capsys):
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tmp_path / "p", "--heads-width", "3/4",
                           "--ffn-width", "0.25", "--allocation", "global")
    assert code == 0, err
    data = json.loads(run_cli(capsys, "info", tmp_path / "p", "--json")[1])
    assert sum(data["heads_per_layer"]) == 6 and sum(data["ffn_per_layer"]) == 18


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--width", "0"], "outside (0, 1]"),
        (["--width", "1.5"], "outside (0, 1]"),
        (["--width", "-1"], "outside (0, 1]"),
        (["--width", "1/8"], "keeps no head"),
        (["--width", "half"], "not a number"),
        ([], "no width given"),
        (["--width", "0.5", "--allocation", "random"], "unknown --allocation"),
        (["--width", "0.5", "--no-such-flag"], "No such option"),
    ],
)
def test_bad_prune_settings_are_one_line_errors(tiny_dir, tmp_path, capsys, args, message):
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tmp_path / "p", *args)
    assert code != 0
    assert message in _single_error_line(err)
    assert not (tmp_path / "p").exists()


def test_existing_output_is_refused(tiny_dir, tmp_path, capsys):
    (tmp_path / "p").mkdir()
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tmp_path / "p", "--width", "0.5")
    assert code != 0 and "--overwrite" in _single_error_line(err)
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tmp_path / "p", "--width", "0.5", "--overwrite")
    assert code == 0, err


def test_output_equal_to_input_is_refused_even_with_overwrite(tiny_dir, capsys):
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tiny_dir, "--width", "0.5", "--overwrite")
    assert code != 0 and "inputs are never modified" in _single_error_line(err)


def test_missing_and_corrupt_checkpoints(tiny_dir, tmp_path, capsys):
    code, _, err = run_cli(capsys, "info", tmp_path / "missing")
    assert code != 0 and "does not exist" in _single_error_line(err)
    (tiny_dir / "config.json").write_text("{broken")
    code, _, err = run_cli(capsys, "info", tiny_dir)
    assert code != 0 and "corrupt config.json" in _single_error_line(err)


def test_unsupported_architecture(tmp_path, capsys):
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)).save_pretrained(tmp_path / "gpt2")
    code, _, err = run_cli(capsys, "prune", tmp_path / "gpt2", "-o", tmp_path / "p", "--width", "0.5")
    line = _single_error_line(err)
    assert code != 0 and "unsupported architecture 'gpt2'" in line and "deberta-v2" in line


def test_debug_variable_shows_the_traceback(tmp_path, monkeypatch):
    from ghostify.cli.app import main
    from ghostify.errors import CheckpointError

    monkeypatch.setenv("GHOSTIFY_DEBUG", "1")
    with pytest.raises(CheckpointError):
        main(["info", str(tmp_path / "missing")])


def test_bert_base_figures_match_the_paper(tmp_path, capsys):
    """BertConfig() at seq 128: ~109.5M params and ~22.4G FLOPs; pruned to 3/12: ~45.7M, ~5.6G."""
    from transformers import BertConfig, BertModel

    BertModel(BertConfig()).save_pretrained(tmp_path / "base")
    data = json.loads(run_cli(capsys, "info", tmp_path / "base", "--json")[1])
    assert data["params"] == pytest.approx(109.5e6, rel=0.002)
    assert data["flops"] == pytest.approx(22.4e9, rel=0.01)
    code, _, err = run_cli(capsys, "prune", tmp_path / "base", "-o", tmp_path / "quarter", "--width", "3/12")
    assert code == 0, err
    data = json.loads(run_cli(capsys, "info", tmp_path / "quarter", "--json")[1])
    assert data["params"] == pytest.approx(45.7e6, rel=0.002)
    assert data["flops"] == pytest.approx(5.6e9, rel=0.01)
    assert data["heads_per_layer"] == [3] * 12 and data["ffn_per_layer"] == [768] * 12


def test_info_history_shows_the_settings_that_differ_from_the_defaults(tiny_dir, tmp_path, capsys):
    """Issue 39: the history dumped every setting (about 50 lines); --json keeps them all."""
    code, _, err = run_cli(capsys, "prune", tiny_dir, "-o", tmp_path / "p", "--width", "2/4", "--seed", "3")
    assert code == 0, err
    code, out, err = run_cli(capsys, "info", tmp_path / "p")
    assert code == 0, err
    shown = " ".join(out.split())
    assert "width=2/4" in shown and "seed=3" in shown
    assert "allocation=" not in shown and "tune_masks=" not in shown and "rearrange=" not in shown  # defaults
    assert "criterion=weight-magnitude" in shown  # what it did without scores: not the default (fisher)
    assert "every setting" in shown and "--json" in shown
    code, out, _ = run_cli(capsys, "info", tmp_path / "p", "--json")
    arguments = json.loads(out)["history"][0]["arguments"]
    assert arguments["allocation"] == "uniform" and arguments["tune_masks"] == 0 and arguments["width"] == "2/4"
