"""On the real MiniLM: RefBERT end to end — the SST-2 teacher pruned to half width, distilled with
references to the teacher's pre-computed representations of similar training sentences, fine-tuned
and evaluated (eval retrieves references from the checkpoint's store, without the teacher); the
same chain without references for comparison."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.real


def test_prune_distill_with_references_finetune_eval(sst2_teacher, glue, tmp_path, capsys):
    def ok(*args):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        return out, err

    sst2 = ["--dataset", glue, "--task", "sst2", "--max-length", "64", "--max-samples", "1000", "--epochs", "1"]
    ok("prune", sst2_teacher, "-o", tmp_path / "pruned", "--width", "0.5")
    accuracy = {}
    for name, extra in (("references", ["--references", "--reference-delta", "0.01"]), ("plain", [])):
        _, err = ok("distill", "--teacher", sst2_teacher, "--student", tmp_path / "pruned", "-o", tmp_path / f"d-{name}",
                    *sst2, "--learning-rate", "2e-4", "--logit-weight", "1", "--attention-weight", "1", *extra)
        ok("finetune", tmp_path / f"d-{name}", "-o", tmp_path / f"f-{name}", *sst2, "--learning-rate", "5e-5")
        out, _ = ok("eval", tmp_path / f"f-{name}", "--dataset", glue, "--task", "sst2", "--json")
        result = json.loads(out)
        assert result["samples"] == 872
        accuracy[name] = result["metrics"]["accuracy"]
        if name == "references":
            assert "retrieval agreement" in err
            record = json.loads((tmp_path / f"f-{name}" / "config.json").read_text())["ghostify"]["methods"]["references"]
            assert record["entries"] == 1000 and (tmp_path / f"f-{name}" / "references.safetensors").is_file()
            info = json.loads(ok("info", tmp_path / f"f-{name}", "--json")[0])
            print("store", info["reference_store"], "agreement", record["retrieval"]["agreement"])
    print("sst2 accuracy", accuracy)
    assert accuracy["references"] > 0.7 > 444 / 872  # SST-2 validation: 444 positive of 872
