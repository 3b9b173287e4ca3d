"""A single data file as --dataset (.csv, .tsv, .json, .jsonl, .parquet), its held-out validation
split or --validation-file, and string labels mapped to ids and kept as the head's label names."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from ghostify.data import label_kind, load_split, resolve_task
from ghostify.testing import TOY_WORDS, tiny_checkpoint

from .conftest import run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

EXTENSIONS = (".csv", ".tsv", ".json", ".jsonl", ".parquet")


def _rows(count: int, seed: int = 0) -> list[dict[str, str]]:
    """Toy sentences labelled by name: "pos" when "great" occurs."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        words = [rng.choice(TOY_WORDS) for _ in range(rng.randint(4, 9))]
        good = i % 2 == 0
        if good:
            words.insert(rng.randrange(len(words) + 1), "great")
        rows.append({"sentence": " ".join(words), "label": "pos" if good else "neg"})
    return rows


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    """``rows`` as the data file ``path`` names by its extension."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".csv", ".tsv"):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="," if path.suffix == ".csv" else "\t")
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


TASK = resolve_task(None, text_columns=("sentence",), label_column="label")


@pytest.mark.parametrize("extension", EXTENSIONS)
def test_a_single_file_reads_with_a_held_out_validation_split(tmp_path, extension):
    path = write_rows(tmp_path / f"single{extension}", _rows(40))
    train = load_split(str(path), TASK, "train")
    with pytest.warns(UserWarning, match=r"validation split is 4 of its 40 rows \(10%, held out with seed 0"):
        validation = load_split(str(path), TASK, "validation")
    assert (train.num_samples, validation.num_samples) == (36, 4)
    texts = [r["sentence"] for r in _rows(40)]
    assert sorted([*train.rows["sentence"], *validation.rows["sentence"]]) == sorted(texts)  # a partition
    kind = label_kind(train.rows, "label", dataset=str(path))
    assert (kind.regression, kind.num_labels, kind.names, kind.strings) == (False, 2, ("neg", "pos"), True)


def test_the_held_out_rows_are_the_same_on_every_read(tmp_path):
    path = write_rows(tmp_path / "a.csv", _rows(50))
    with pytest.warns(UserWarning):
        first = load_split(str(path), TASK, "validation")
    with pytest.warns(UserWarning):
        again = load_split(str(path), TASK, "validation", seed=7)  # --seed draws subsets, never the hold-out
    assert list(first.rows["sentence"]) == list(again.rows["sentence"]) and first.num_samples == 5
    # the rows held out follow the file, not its name or place: a copy holds out the same rows
    copy = write_rows(tmp_path / "elsewhere" / "b.csv", _rows(50))
    with pytest.warns(UserWarning):
        assert list(load_split(str(copy), TASK, "validation").rows["sentence"]) == list(first.rows["sentence"])


def test_a_validation_file_is_the_validation_split_and_train_is_the_whole_file(tmp_path, recwarn):
    path = write_rows(tmp_path / "train.jsonl", _rows(30))
    held = write_rows(tmp_path / "dev.tsv", _rows(6, seed=3))
    train = load_split(str(path), TASK, "train", validation_file=str(held))
    validation = load_split(str(path), TASK, "validation", validation_file=str(held))
    assert (train.num_samples, validation.num_samples) == (30, 6)
    assert list(validation.rows["sentence"]) == [r["sentence"] for r in _rows(6, seed=3)]
    assert not [w for w in recwarn if "held out" in str(w.message)]


def test_string_labels_round_trip_to_the_checkpoint_and_its_export(tmp_path, capsys, without_load_check):
    model = tiny_checkpoint(tmp_path / "m", head="base")
    data = write_rows(tmp_path / "reviews.csv", _rows(48))
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", data, "--text-columns", "sentence",
                           "--label-column", "label", "--epochs", "1", "--batch-size", "8")
    assert code == 0, err
    assert "no --validation-file was given" in err and err.count("held out") == 1
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"] == {"neg": 0, "pos": 1}
    # a later command keeps the names, and eval maps the strings through them
    code, _, err = run_cli(capsys, "prune", tmp_path / "ft", "-o", tmp_path / "pruned", "--width", "0.5")
    assert code == 0, err
    code, out, err = run_cli(capsys, "eval", tmp_path / "pruned", "--dataset", data, "--text-columns", "sentence",
                             "--label-column", "label", "--json")
    assert code == 0, err
    assert json.loads(out)["samples"] == 5
    code, _, err = run_cli(capsys, "export", tmp_path / "pruned", "-o", tmp_path / "hf")
    assert code == 0, err
    exported = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert exported["id2label"] == {"0": "neg", "1": "pos"} and exported["label2id"] == {"neg": 0, "pos": 1}


def test_the_validation_file_flag_reaches_training(tmp_path, capsys):
    model = tiny_checkpoint(tmp_path / "m", head="base")
    data = write_rows(tmp_path / "train.parquet", _rows(24))
    dev = write_rows(tmp_path / "dev.json", _rows(7, seed=5))
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", data, "--validation-file", dev,
                           "--text-columns", "sentence", "--label-column", "label", "--epochs", "1", "--batch-size", "8")
    assert code == 0, err
    assert "held out" not in err
    metrics = [json.loads(line) for line in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("eval", {}).get("samples") == 7 for m in metrics), metrics


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data-files")
    write_rows(root / "single.csv", _rows(20))
    write_rows(root / "one.csv", _rows(1))
    write_rows(root / "other-labels.csv", [{"sentence": "great film", "label": "maybe"}] * 4)
    (root / "dev.xml").write_text("<rows/>")
    # a classifier whose head names its classes neg and pos
    tiny_checkpoint(root / "named")
    config = json.loads((root / "named" / "config.json").read_text())
    config.update(id2label={"0": "neg", "1": "pos"}, label2id={"neg": 0, "pos": 1})
    (root / "named" / "config.json").write_text(json.dumps(config))
    return root


CASES = [
    ("missing-validation-file", ["finetune", "{m}", "-o", "{out}", "--dataset", "{toy}", "--text-columns", "sentence",
                                 "--validation-file", "{files}/nowhere.csv"], "--validation-file"),
    ("validation-file-kind", ["finetune", "{m}", "-o", "{out}", "--dataset", "{toy}", "--text-columns", "sentence",
                              "--validation-file", "{files}/dev.xml"], "unknown kind of data file '.xml'"),
    ("file-split", ["eval", "{m}", "--dataset", "{files}/single.csv", "--text-columns", "sentence", "--split", "test"],
     "its splits are train and validation"),
    ("one-row", ["finetune", "{m}", "-o", "{out}", "--dataset", "{files}/one.csv", "--text-columns", "sentence"],
     "too few to hold out a validation split"),
    ("unknown-label-name", ["eval", "{files}/named", "--dataset", "{files}/other-labels.csv",
                            "--text-columns", "sentence", "--split", "train"], "label 'maybe' in column 'label'"),
]


@pytest.mark.parametrize("case,args,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_data_files_are_one_line(capsys, world, files, tmp_path, case, args, expected):  # noqa: F811
    out = tmp_path / "out"
    filled = _fill([a.replace("{files}", str(files)) for a in args], world, out)
    _check_refused(capsys, world, out, filled, expected, inputs=(files,))


@pytest.mark.parametrize("extension", (".csv", ".jsonl", ".parquet"))
def test_the_one_text_column_besides_the_label_is_read_without_text_columns(tmp_path, capsys, extension):
    """Issue 39: a file with one text column besides the label needed --text-columns; it is inferred, and said."""
    model = tiny_checkpoint(tmp_path / "m", head="base")
    rows = [{"id": i, "review": r["sentence"], "label": r["label"]} for i, r in enumerate(_rows(40))]
    data = write_rows(tmp_path / f"reviews{extension}", rows)
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", data, "--epochs", "1",
                           "--batch-size", "8")
    assert code == 0, err
    said = [line for line in err.splitlines() if "'review'" in line]
    assert len(said) == 1 and said[0].startswith("warning: ") and "only column of text besides the label 'label'" in said[0]
    code, out, err = run_cli(capsys, "eval", tmp_path / "ft", "--dataset", data, "--json")
    assert code == 0, err
    assert json.loads(out)["samples"] == 4


def test_two_text_columns_still_need_text_columns(tmp_path, capsys):
    model = tiny_checkpoint(tmp_path / "m", head="base")
    data = write_rows(tmp_path / "pairs.csv", [{"a": r["sentence"], "b": r["sentence"], "label": r["label"]}
                                               for r in _rows(20)])
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", data)
    assert code == 2 and "set --text-columns (its text columns are a, b;" in err and "Traceback" not in err


def test_a_file_without_labels_suggests_label_free_only_where_a_command_has_it(tmp_path, capsys):
    """Issue 39: finetune, which has no --label-free, was told to pass it."""
    model = tiny_checkpoint(tmp_path / "m", head="base")
    data = write_rows(tmp_path / "unlabelled.csv", [{"sentence": r["sentence"]} for r in _rows(20)])
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", data)
    assert code == 2 and "has no labels in column 'label'" in err and "set --label-column" in err
    assert "--label-free" not in err
    code, _, err = run_cli(capsys, "importance", model, "-o", tmp_path / "s", "--dataset", data, "--samples", "4")
    assert code == 2 and "or score without labels with --label-free" in err
