"""Task data, good and bad: datasets are never written (no ``cache-*.arrow`` beside a
``save_to_disk`` dataset, even when it is read-only or named relative to another working
directory), faults users make in task data are one `error:` line, and rows that cannot be used
are dropped with one counted `warning:` line."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import subprocess
from pathlib import Path

import pytest

from ghostify.testing import (
    NER_TAGS,
    TOY_WORDS,
    tiny_checkpoint,
    tiny_model,
    tiny_sentence_transformer,
    tiny_tokenizer,
    write_toy_dataset,
)

from .conftest import built_once, run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

CONTEXT = "the film was great music and the city was dark"
QA = ["--question-column", "question", "--max-length", "32", "--doc-stride", "8"]
NER = ["--tokens-column", "tokens", "--tags-column", "ner_tags", "--max-length", "32"]
CLS = ["--text-columns", "sentence", "--max-length", "32"]
SHORT = ["--epochs", "1", "--batch-size", "4"]


def _save(directory: Path, train: list[dict], validation: list[dict] | None = None, features=None) -> Path:
    """A ``DatasetDict.save_to_disk`` directory (no validation split when ``validation`` is None)."""
    import datasets

    splits = {"train": datasets.Dataset.from_list(train, features=features)}
    if validation is not None:
        splits["validation"] = datasets.Dataset.from_list(validation, features=features)
    datasets.DatasetDict(splits).save_to_disk(str(directory))
    return directory


def _answer(text: str, start: int | None = None) -> dict:
    return {"text": [text], "answer_start": [CONTEXT.index(text) if start is None else start]}


def _qa(answers) -> dict:
    return {"question": "what is after great", "context": CONTEXT, "answers": answers}


def _sentences(count: int, seed: int = 0) -> list[dict]:
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(count):
        words = [rng.choice(TOY_WORDS) for _ in range(rng.randint(4, 9))]
        if i % 2:
            words.insert(rng.randrange(len(words)), "great")
        rows.append({"sentence": " ".join(words), "label": i % 2})
    return rows


def _ner_features():
    import datasets

    return datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                              "ner_tags": datasets.Sequence(datasets.ClassLabel(names=list(NER_TAGS)))})


NER_ROW = {"tokens": ["the", "film", "was", "city"], "ner_tags": [0, 1, 0, 3]}
NO_TOKENS = {"tokens": [], "ner_tags": []}


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> Path:
    """Tiny models and datasets, good ones and the faults users make."""
    def build(root: Path) -> None:
        import datasets

        datasets.disable_progress_bars()
        tiny_checkpoint(root / "base", head="base")
        tiny_checkpoint(root / "cls-model")
        tiny_sentence_transformer(root / "st")
        tiny_model("bert", "masked-lm").save_pretrained(root / "mlm")
        tiny_tokenizer(root / "mlm")
        good_qa = [_qa(_answer("music")), _qa(_answer("city")), _qa({"text": [], "answer_start": []})] * 2
        # faults that are one error line
        _save(root / "qa-strings", [_qa("music")] * 4, [_qa("music")] * 2)
        _save(root / "qa-negative", [_qa(_answer("music", -1))] * 4, good_qa)
        _save(root / "qa-lengths", [_qa({"text": ["music", "city"], "answer_start": [19]})] * 4, good_qa)
        _save(root / "qa-no-text-key", [_qa({"txt": ["music"], "answer_start": [19]})] * 4, good_qa)
        _save(root / "qa-all-elsewhere", [_qa(_answer("music", 3))] * 4, good_qa)
        _save(root / "ner-all-empty", [NO_TOKENS] * 4, [NER_ROW] * 2, features=_ner_features())
        _save(root / "ner-validation-tags", [{"tokens": ["the", "film"], "ner_tags": [0, 1]}] * 4,
              [{"tokens": ["the", "city"], "ner_tags": [0, 3]}] * 2)  # plain ids: the training split names 2 tags
        _save(root / "train-only", _sentences(8))
        nan = [{"sentence": r["sentence"], "label": float(i) + 0.5} for i, r in enumerate(_sentences(8))]
        nan[5]["label"] = math.nan
        _save(root / "nan-scores", nan, nan)
        (root / "empty-cell").mkdir()
        for split in ("train", "validation"):
            (root / "empty-cell" / f"{split}.csv").write_text("sentence,label\nthe film,0.5\nthe city,\nthe sea,1.5\n")
        (root / "binary.txt").write_bytes(bytes(range(256)) * 4)
        (root / "latin1.txt").write_bytes("the caf\xe9 was great\n".encode("latin-1"))
        (root / "empty.txt").write_bytes(b"")
        (root / "blank.txt").write_text("\n   \n\t\n")
        # good datasets, for the runs that must leave them as they are
        _save(root / "cls", _sentences(12), _sentences(6, seed=1))
        _save(root / "ner", [NER_ROW, {"tokens": ["a", "films", "sea"], "ner_tags": [0, 1, 3]}] * 4, [NER_ROW] * 3,
              features=_ner_features())
        _save(root / "squad", good_qa, good_qa)
        # a few unusable rows among good ones: dropped, counted in one warning
        _save(root / "ner-some-empty", [NER_ROW] * 6 + [NO_TOKENS] * 2, [NER_ROW] * 3, features=_ner_features())
        _save(root / "qa-some-elsewhere", good_qa + [_qa(_answer("music", 3))] * 3, good_qa)
        code = _augment(root)
        assert code == 0
    return built_once(tmp_path_factory, "bad-data", build)


def _augment(root: Path) -> int:
    """The augmented dataset `ghostify augment` writes (a save_to_disk directory of its own)."""
    from ghostify.cli.app import main

    return main(["augment", "--mlm", str(root / "mlm"), "-o", str(root / "augmented"), "--dataset", str(root / "cls"),
                 *CLS, "--per-example", "2"])


# ----------------------------------------------------------------------------------------------
# refusals: (id, arguments, what the error line says); {data} is the fixture's root
# ----------------------------------------------------------------------------------------------
CASES: list[tuple[str, list[str], str]] = [
    ("qa-answers-are-strings", ["finetune", "{data}/base", "-o", "{out}", "--dataset", "{data}/qa-strings", *QA,
                                *SHORT],
     "answers of row 0 in column 'answers' are the string 'music'"),
    ("qa-answers-are-strings-eval", ["eval", "{data}/base", "--dataset", "{data}/qa-strings", *QA],
     "convert the column"),
    ("qa-negative-answer-start", ["finetune", "{data}/base", "-o", "{out}", "--dataset", "{data}/qa-negative", *QA,
                                  *SHORT],
     "answer_start -1 of row 0"),
    ("qa-one-start-for-two-texts", ["importance", "{data}/base", "-o", "{out}", "--dataset", "{data}/qa-lengths", *QA,
                                    "--samples", "4"], "have 2 texts but 1 answer_start values"),
    ("qa-answers-without-text", ["finetune", "{data}/base", "-o", "{out}", "--dataset", "{data}/qa-no-text-key", *QA,
                                 *SHORT], "not {\"text\": [...]"),
    ("qa-no-answer-in-its-context", ["finetune", "{data}/base", "-o", "{out}", "--dataset", "{data}/qa-all-elsewhere",
                                     *QA, *SHORT],
     "none of the 4 rows of split 'train'"),
    ("ner-no-tokens-anywhere", ["finetune", "{data}/base", "-o", "{out}", "--dataset", "{data}/ner-all-empty", *NER,
                                *SHORT], "4 with no tokens"),
    ("ner-no-tokens-label-free", ["importance", "{data}/base", "-o", "{out}", "--dataset", "{data}/ner-all-empty", *NER,
                                  "--label-free", "--samples", "4"], "none of the 4 rows"),
    ("ner-validation-tag-unknown", ["finetune", "{data}/base", "-o", "{out}", "--dataset", "{data}/ner-validation-tags",
                                    *NER, *SHORT], "tag 3 in row 0 of column 'ner_tags' of split 'validation'"),
    ("nan-regression-score", ["finetune", "{data}/cls-model", "-o", "{out}", "--dataset", "{data}/nan-scores", *CLS,
                              *SHORT], "row 5 of split 'train'"),
    ("nan-regression-score-eval", ["eval", "{data}/cls-model", "--dataset", "{data}/nan-scores", *CLS],
     "column 'label' is NaN"),
    ("empty-label-cell", ["importance", "{data}/cls-model", "-o", "{out}", "--dataset", "{data}/empty-cell", *CLS,
                          "--samples", "4"], "row 1 of split 'train'"),
    ("saved-dataset-without-the-split", ["eval", "{data}/cls-model", "--dataset", "{data}/train-only", *CLS],
     "has no split 'validation' (its splits: train)"),
    ("saved-dataset-without-eval-split", ["finetune", "{data}/cls-model", "-o", "{out}", "--dataset",
                                          "{data}/train-only", *CLS, *SHORT], "save it with a 'validation' split"),
    ("saved-dataset-unknown-split", ["eval", "{data}/cls-model", "--dataset", "{data}/cls", *CLS, "--split", "dev"],
     "has no split 'dev' (its splits: train, validation)"),
    ("binary-text-file", ["importance", "{data}/st", "-o", "{out}", "--task", "embeddings", "--dataset",
                          "{data}/binary.txt", "--text-columns", "text", "--max-length", "32"],
     "binary.txt is not a text file"),
    ("latin1-text-file", ["importance", "{data}/st", "-o", "{out}", "--task", "embeddings", "--dataset",
                          "{data}/latin1.txt", "--text-columns", "text", "--max-length", "32"],
     "byte 0xe9 at offset 7 is not UTF-8"),
    ("empty-text-file", ["importance", "{data}/st", "-o", "{out}", "--task", "embeddings", "--dataset",
                         "{data}/empty.txt", "--text-columns", "text", "--max-length", "32"], "empty.txt is empty"),
    ("blank-text-file", ["importance", "{data}/st", "-o", "{out}", "--task", "embeddings", "--dataset",
                         "{data}/blank.txt", "--text-columns", "text", "--max-length", "32"],
     "its 3 lines are all blank"),
    ("text-file-for-distill", ["distill", "--teacher", "{data}/st", "--student", "{data}/st", "-o", "{out}", "--task",
                               "embeddings", "--dataset", "{data}/binary.txt", "--text-columns", "text",
                               "--max-length", "32", *SHORT], "is a NUL byte"),
]


def _args(args: list[str], data: Path, world: Path, out: Path) -> list[str]:
    return _fill([a.replace("{data}", str(data)) for a in args], world, out)


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_task_data_is_one_line_and_changes_nothing(name, args, expected, data, world, tmp_path,  # noqa: F811
                                                      capsys):
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _args(args, data, world, out), expected, inputs=(data,))


def test_a_relative_bad_dataset_from_another_directory_is_one_line(data, world, tmp_path, capsys):  # noqa: F811
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "inputs").symlink_to(data)
    _check_refused(capsys, world, elsewhere / "out",
                   ["finetune", "inputs/base", "-o", "out", "--dataset", "inputs/qa-strings", *QA, *SHORT],
                   "are the string 'music'", inputs=(data,), cwd=elsewhere)


def test_there_are_enough_new_cases():
    assert len(CASES) >= 12


# ----------------------------------------------------------------------------------------------
# single data files (.csv, .tsv, .json, .jsonl, .parquet): one reader per kind, whose rows are
# named as a person counts them in the file
# ----------------------------------------------------------------------------------------------
def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _csv(path: Path, rows: list[dict], delimiter: str = ",") -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _parquet(path: Path, columns: dict[str, list]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> Path:
    """Data files with the faults users make, and models to read them with."""
    def build(root: Path) -> None:
        tiny_checkpoint(root / "cls-model")
        tiny_sentence_transformer(root / "st")
        rows = _sentences(20)
        good = [json.dumps(row) for row in rows]
        (root / "empty.jsonl").write_bytes(b"")
        (root / "blank.jsonl").write_text("\n  \n\n")
        _jsonl(root / "mixed-labels.jsonl", [{**row, "label": [0, 1, "pos"][i % 3]} for i, row in enumerate(rows)])
        _parquet(root / "words.parquet", {"sentence": [row["sentence"].split() for row in rows],
                                          "label": [row["label"] for row in rows]})
        _csv(root / "empty-text.csv", [{**row, "sentence": "" if i == 4 else row["sentence"]} for i, row in enumerate(rows)])
        _jsonl(root / "null-text.jsonl", [{**row, "sentence": None if i == 2 else row["sentence"]} for i, row in enumerate(rows)])
        _csv(root / "named-scores.csv", [{**row, "label": ["high", "low"][i % 2]} for i, row in enumerate(rows)])
        (root / "bad-line.jsonl").write_text("\n".join(good[:5] + ['{"sentence": "the film", "label": 1'] + good[5:]) + "\n")
        (root / "list-line.jsonl").write_text("\n".join(good[:3] + ["[1, 2]"] + good[3:]) + "\n")
        _jsonl(root / "other-columns.jsonl", [{"text": row["sentence"], "label": row["label"]} for row in rows])
        (root / "latin1.csv").write_bytes("sentence,label\nthe caf\xe9 was great,1\nthe film,0\n".encode("latin-1"))
        (root / "binary.csv").write_bytes(bytes(range(256)) * 4)
        (root / "header-only.csv").write_text("sentence,label\n")
        (root / "ragged.csv").write_text("sentence,label\nthe film,1\nthe city,0\nthe sea,1,extra\n")
        (root / "ragged.tsv").write_text("sentence\tlabel\nthe film\t1\nthe city\t0\t1\n")
        (root / "not-parquet.parquet").write_text("sentence,label\nthe film,1\n")
        (root / "empty.parquet").write_bytes(b"")
        _jsonl(root / "null-label.jsonl", [{**row, "label": None if i == 2 else row["label"]} for i, row in enumerate(rows)])
        _jsonl(root / "list-label.jsonl", [{**row, "label": [1] if i == 1 else row["label"]} for i, row in enumerate(rows)])
        (root / "broken-array.json").write_text(json.dumps(rows)[:-40])
        _jsonl(root / "number-text.jsonl", [{"sentence": i, "label": i % 2} for i in range(20)])
        (root / "folder.csv").mkdir()
        _save(root / "class-names", _sentences(8), _sentences(4, seed=1),
              features=_features({"sentence": "string", "label": ["neg", "pos"]}))
    return built_once(tmp_path_factory, "bad-files", build)


def _features(columns: dict) -> object:
    """datasets.Features: a column's dtype, or its class names (a ClassLabel)."""
    import datasets

    return datasets.Features({name: datasets.ClassLabel(names=kind) if isinstance(kind, list) else datasets.Value(kind)
                              for name, kind in columns.items()})


FILE = ["--text-columns", "sentence", "--label-column", "label", "--max-length", "32"]
#: finetune {files}/cls-model on a file of {files}
TUNE = ["finetune", "{files}/cls-model", "-o", "{out}", *SHORT, *FILE, "--dataset"]
FILE_CASES: list[tuple[str, list[str], str]] = [
    # issue 36, items 14-18
    ("empty-jsonl", [*TUNE, "{files}/empty.jsonl"], "empty.jsonl is empty (0 bytes); a .jsonl data file holds one JSON"),
    ("jsonl-mixed-labels-are-three-classes", [*TUNE, "{files}/mixed-labels.jsonl"],
     "predicts 2 labels but task custom has 3"),  # "0", "1" and "pos", as the same rows in a CSV file
    ("parquet-lists-of-words", [*TUNE, "{files}/words.parquet"],
     "column 'sentence' of {files}/words.parquet holds lists of words, not texts"),
    ("csv-empty-text-cell", [*TUNE, "{files}/empty-text.csv"],
     "row 5 of {files}/empty-text.csv (counting from 1 below the header) has no text: column 'sentence' is empty"),
    ("regression-on-class-names", [*TUNE, "{files}/named-scores.csv", "--metric", "pearson_spearman"],
     "task custom is a regression (metric pearson_spearman), but row "),
    # more of the same surfaces
    ("jsonl-null-text", [*TUNE, "{files}/null-text.jsonl"], "line 3 of {files}/null-text.jsonl has no text"),
    ("jsonl-blank-lines", [*TUNE, "{files}/blank.jsonl"], "its 3 lines are all blank"),
    ("jsonl-invalid-line", [*TUNE, "{files}/bad-line.jsonl"], "line 6 of {files}/bad-line.jsonl is not valid JSON"),
    ("jsonl-list-line", [*TUNE, "{files}/list-line.jsonl"], "line 4 of {files}/list-line.jsonl is a JSON list, not an object"),
    ("jsonl-missing-text-column", [*TUNE, "{files}/other-columns.jsonl"], "has no column 'sentence' (columns: text, label)"),
    ("jsonl-null-label", [*TUNE, "{files}/null-label.jsonl"], "line 3 of {files}/null-label.jsonl has no label"),
    ("jsonl-list-among-labels", [*TUNE, "{files}/list-label.jsonl"],
     "column 'label' of {files}/list-label.jsonl mixes kinds of value: line 1 holds a number, line 2 a list"),
    ("jsonl-numbers-as-text", [*TUNE, "{files}/number-text.jsonl"], "column 'sentence' of {files}/number-text.jsonl holds "
     "int values, not texts"),
    ("json-broken-array", [*TUNE, "{files}/broken-array.json"], "broken-array.json is not valid JSON: "),
    ("csv-latin1", [*TUNE, "{files}/latin1.csv"], "byte 0xe9 at offset 22 is not UTF-8; save it as UTF-8"),
    ("csv-binary", [*TUNE, "{files}/binary.csv"], "binary.csv is not a text file: byte 0x00 at offset 0 is a NUL byte"),
    ("csv-header-only", [*TUNE, "{files}/header-only.csv"], "has a header (sentence, label) but no rows"),
    ("csv-ragged-row", [*TUNE, "{files}/ragged.csv"], "Expected 2 fields in line 4, saw 3"),
    ("tsv-ragged-row", [*TUNE, "{files}/ragged.tsv"], "cannot read {files}/ragged.tsv as TSV"),
    ("parquet-that-is-not", [*TUNE, "{files}/not-parquet.parquet"], "is not a parquet file, or it is damaged"),
    ("parquet-empty", [*TUNE, "{files}/empty.parquet"], "empty.parquet is empty (0 bytes)"),
    ("validation-file-bad-line", [*TUNE, "{data}/cls", "--validation-file", "{files}/bad-line.jsonl"],
     "line 6 of {files}/bad-line.jsonl is not valid JSON"),
    ("validation-file-is-a-directory", [*TUNE, "{data}/cls", "--validation-file", "{files}/folder.csv"],
     "--validation-file {files}/folder.csv is not a file"),
    ("regression-on-a-class-label", ["eval", "{files}/cls-model", "--dataset", "{files}/class-names", *FILE, "--metric",
                                     "pearson_spearman"], "holds class names (neg, pos)"),
    ("embeddings-empty-text-cell", ["importance", "{files}/st", "-o", "{out}", "--task", "embeddings", "--dataset",
                                    "{files}/empty-text.csv", "--text-columns", "sentence", "--max-length", "32"],
     "row 5 of {files}/empty-text.csv (counting from 1 below the header) has no text"),
]


@pytest.mark.parametrize(("name", "args", "expected"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_data_files_are_one_line_and_change_nothing(name, args, expected, files, data, world, tmp_path,  # noqa: F811
                                                       capsys):
    out = tmp_path / "out"
    filled = _args([a.replace("{files}", str(files)) for a in args], data, world, out)
    _check_refused(capsys, world, out, filled, expected.replace("{files}", str(files)), inputs=(files, data))


def test_there_are_enough_data_file_cases():
    assert len(FILE_CASES) >= 20


def test_mixed_labels_read_alike_from_csv_and_jsonl(tmp_path, capsys):
    """0, 1 and "pos" in one column: a CSV file reads them as the strings "0", "1" and "pos"; a
    JSON lines file follows the same rule, so both train a head of the same three classes."""
    from ghostify.data import label_kind, load_split, resolve_task

    rows = [{**row, "label": [0, 1, "pos"][i % 3]} for i, row in enumerate(_sentences(30))]
    task = resolve_task(None, text_columns=("sentence",), label_column="label")
    kinds = {}
    for path in (_csv(tmp_path / "mixed.csv", rows), _jsonl(tmp_path / "mixed.jsonl", rows)):
        split = load_split(str(path), task, "train", validation_file=str(path))
        kinds[path.suffix] = label_kind(split.rows, "label", dataset=str(path))
    assert kinds[".csv"] == kinds[".jsonl"]
    assert (kinds[".jsonl"].names, kinds[".jsonl"].strings) == (("0", "1", "pos"), True)
    tiny_checkpoint(tmp_path / "base", head="base")
    code, _, err = run_cli(capsys, "finetune", tmp_path / "base", "-o", tmp_path / "tuned", "--dataset",
                           tmp_path / "mixed.jsonl", *FILE, *SHORT)
    assert code == 0, err
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1", "2": "pos"}


@pytest.mark.filterwarnings("ignore:.*is a single data file")
def test_a_bad_row_is_named_by_its_place_in_the_file_whichever_split_holds_it(tmp_path):
    """A single file's validation rows are held out at random; either way the row named is the
    file's (row 7 below the header, line 7 of JSON lines), not its index in the split."""
    from ghostify.data import load_split, resolve_task
    from ghostify.errors import DataError

    rows = [{**row, "sentence": None if i == 6 else row["sentence"]} for i, row in enumerate(_sentences(30))]
    task = resolve_task(None, text_columns=("sentence",), label_column="label")
    for path, place in ((_csv(tmp_path / "f.csv", rows), "row 7 of"), (_jsonl(tmp_path / "f.jsonl", rows), "line 7 of")):
        messages = []
        for split in ("train", "validation"):
            try:
                load_split(str(path), task, split)
            except DataError as exc:
                messages.append(str(exc))
        assert len(messages) == 1 and messages[0].startswith(f"{place} {path} "), messages


def test_good_files_with_a_byte_order_mark_or_an_array_read(tmp_path):
    """A BOM (Excel's UTF-8 CSV) is not part of the first column's name; a .json file may be one list."""
    from ghostify.data import load_split, resolve_task

    rows = _sentences(20)
    task = resolve_task(None, text_columns=("sentence",), label_column="label")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + _csv(tmp_path / "plain.csv", rows).read_bytes())
    bom_lines = tmp_path / "bom.jsonl"
    bom_lines.write_bytes(b"\xef\xbb\xbf" + _jsonl(tmp_path / "plain.jsonl", rows).read_bytes())
    array = tmp_path / "array.json"
    array.write_text(json.dumps(rows, indent=1))
    for path in (bom, bom_lines, array):
        split = load_split(str(path), task, "train", validation_file=str(path))
        assert split.rows.column_names[0] == "sentence" and list(split.rows["sentence"]) == [r["sentence"] for r in rows]


def test_lists_of_words_are_what_a_tagging_task_reads(tmp_path):
    """The words of token classification are lists by design: a parquet file of them still reads."""
    from ghostify.data import load_split, resolve_task

    _parquet(tmp_path / "ner.parquet", {"tokens": [NER_ROW["tokens"]] * 8, "ner_tags": [NER_ROW["ner_tags"]] * 8})
    task = resolve_task(None, columns={"tokens_column": "tokens", "tags_column": "ner_tags"})
    split = load_split(str(tmp_path / "ner.parquet"), task, "train", validation_file=str(tmp_path / "ner.parquet"))
    assert split.num_samples == 8 and split.rows[0]["tokens"] == NER_ROW["tokens"]


# ----------------------------------------------------------------------------------------------
# good data: runs that read it leave every file as it was (and add none), even read-only
# ----------------------------------------------------------------------------------------------
def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "directory"
            for p in sorted(root.rglob("*"))}


#: per dataset: the model and the options of its task kind
KINDS = {
    "cls": ("cls-model", CLS),
    "augmented": ("cls-model", CLS),
    "ner": ("base", NER),
    "squad": ("base", QA),
}


def _commands(dataset: str) -> list[list[str]]:
    """finetune, then eval and importance of its output: every command that reads the dataset
    (distill reads it as finetune does, through the same loading)."""
    model, options = KINDS[dataset]
    where = ["--dataset", f"inputs/{dataset}", *options]
    return [["finetune", f"inputs/{model}", "-o", "tuned", *where, *SHORT],
            ["eval", "tuned", *where],
            ["importance", "tuned", "-o", "scored", *where, "--samples", "4"],
            ["distill", "--teacher", "tuned", "--student", "tuned", "-o", "distilled", *where, *SHORT,
             "--max-samples", "4"]]


@pytest.fixture(scope="module")
def read_only(data, tmp_path_factory):
    """The fixture's data under a read-only bind mount where the machine allows one (root);
    elsewhere the data itself (every run is then checked by its hashes and file list alone)."""
    mount = tmp_path_factory.mktemp("read-only-data") / "inputs"
    mount.mkdir()
    if subprocess.run(["mount", "--bind", str(data), str(mount)], capture_output=True).returncode != 0:
        yield data
        return
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], capture_output=True).returncode != 0:
            yield data
            return
        with pytest.raises(OSError):
            (mount / "probe").write_text("x")
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize("dataset", list(KINDS))
def test_commands_leave_saved_datasets_untouched(dataset, data, read_only, tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "work" / "inputs").symlink_to(read_only)  # relative paths, from another working directory
    before = _hashes(data)
    monkeypatch.chdir(work)
    for args in _commands(dataset):
        code, _, err = run_cli(capsys, *args)
        assert code == 0, f"{args[0]}: {err}"
        assert "error:" not in err and not _dropped(err), err
    after = _hashes(data)
    assert sorted(set(after) - set(before)) == [], "files were added to the input"
    assert after == before, "an input changed"
    assert all((work / name).is_dir() for name in ("tuned", "scored", "distilled"))


def _dropped(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: dropped")]


def test_the_augmented_dataset_is_a_saved_dataset(data):
    assert (data / "augmented" / "dataset_dict.json").is_file()
    assert not list(data.rglob("cache-*.arrow"))


# ----------------------------------------------------------------------------------------------
# a few unusable rows: dropped, one counted warning per split read, and the run goes on
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dataset", "model", "options", "expected"), [
    ("ner-some-empty", "base", NER, "dropped 2 of 8 rows of split 'train' of {data}/ner-some-empty: 2 with no tokens"),
    ("qa-some-elsewhere", "base", QA,
     "dropped 3 of 9 rows of split 'train' of {data}/qa-some-elsewhere: 3 whose answer is not at its answer_start "
     "in the context"),
], ids=["ner-no-tokens", "qa-answer-elsewhere"])
def test_unusable_rows_are_dropped_with_one_counted_warning(dataset, model, options, expected, data, tmp_path, capsys):
    before = _hashes(data)
    code, _, err = run_cli(capsys, "finetune", data / model, "-o", tmp_path / "tuned", "--dataset", data / dataset,
                           *options, *SHORT)
    assert code == 0, err
    assert _dropped(err) == [f"warning: {expected.format(data=data)}"], err
    assert "nan" not in err.lower()  # a row with no labelled token would have made the loss NaN
    code, _, err = run_cli(capsys, "importance", tmp_path / "tuned", "-o", tmp_path / "scored", "--dataset",
                           data / dataset, *options, "--samples", "4")
    assert code == 0 and _dropped(err) == [f"warning: {expected.format(data=data)}"], err
    assert _hashes(data) == before


def test_a_csv_dataset_is_not_written_either(world, tmp_path, capsys):  # noqa: F811
    """``load_dataset`` of a CSV directory caches in datasets' own cache, never beside the files."""
    toy = write_toy_dataset(tmp_path / "toy", train=8, validation=4)
    before = _hashes(toy)
    code, _, err = run_cli(capsys, "eval", world / "m", "--dataset", toy, *CLS, "--max-samples", "4")
    assert code == 0, err
    assert _hashes(toy) == before
