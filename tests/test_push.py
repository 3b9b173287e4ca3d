"""`ghostify export --push-to-hub ORG/NAME` (and the recipe's export keys): no machine here reaches
the hub, so what is tested is everything up to it: the folder and the calls prepared (HfApi
recorded), and every way it fails (no token, a token the hub refuses, offline mode, an
unreachable hub, a malformed id) as one line, before any work where that can be known, and
otherwise with the local export complete and nothing written into the inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import ModelCard

from .conftest import REPO, run_cli
from .test_bad_input import _check_refused, _fill, _snapshot, world  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")

UNREACHABLE = "http://127.0.0.1:9"  # loopback, nothing listens: refused at once


class Recorder:
    """HfApi's network methods, recording their arguments (and the folder as it is when uploaded)."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, dict]] = []
        self.uploaded: dict[str, bytes] = {}
        for name in ("whoami", "create_repo", "create_branch", "upload_folder"):
            monkeypatch.setattr(huggingface_hub.HfApi, name, self._method(name))

    def _method(self, name: str):
        def call(api, *args, **kwargs):
            self.calls.append((name, {"args": args, "token": api.token, **kwargs}))
            if name == "whoami":
                return {"name": "someone"}
            if name == "create_repo":
                return huggingface_hub.RepoUrl(f"https://huggingface.co/{args[0]}")
            if name == "upload_folder":
                folder = Path(kwargs["folder_path"])
                self.uploaded = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
                return huggingface_hub.CommitInfo(commit_url=f"https://huggingface.co/{kwargs['repo_id']}/commit/abc",
                                                  commit_message=kwargs["commit_message"], commit_description="",
                                                  oid="abc", pr_url=None)
            return None

        return call


@pytest.fixture
def no_saved_token(monkeypatch, tmp_path):
    """No HF_TOKEN and no `hf auth login` token: the user has none."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))


@pytest.fixture(scope="module")
def refusing_hub():
    """A stand-in hub on loopback that refuses every token (401), as the hub does a revoked one."""

    class Refuse(BaseHTTPRequestHandler):
        def _refuse(self):
            body = json.dumps({"error": "Invalid credentials in Authorization header"}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _refuse

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_export_pushes_the_finished_folder_as_one_commit(world, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                        without_load_check):
    recorder = Recorder(monkeypatch)
    out = tmp_path / "hf"
    before = _snapshot(world)
    code, stdout, stderr = run_cli(capsys, "export", world / "pruned", "-o", out, "--push-to-hub", "my-org/tiny-pruned",
                                   "--private", "--revision", "v1", "--token", "hf_secret", "--json")
    assert code == 0, stderr
    assert [name for name, _ in recorder.calls] == ["whoami", "create_repo", "create_branch", "upload_folder"]
    calls = dict(recorder.calls)
    assert all(call["token"] == "hf_secret" for _, call in recorder.calls)
    assert calls["create_repo"]["args"] == ("my-org/tiny-pruned",) and calls["create_repo"]["exist_ok"] is True
    assert calls["create_repo"]["private"] is True and calls["create_repo"]["repo_type"] == "model"
    assert calls["create_branch"]["branch"] == "v1" and calls["create_branch"]["exist_ok"] is True
    upload = calls["upload_folder"]
    assert (upload["repo_id"], upload["revision"], upload["repo_type"]) == ("my-org/tiny-pruned", "v1", "model")
    assert Path(upload["folder_path"]) == out  # the finished export, never its temporary directory
    assert upload["commit_message"] == "ghostify export --format hf of pruned"
    # what went up is the complete export, card included, naming the repository it went to
    assert {"README.md", "config.json", "model.safetensors", "modeling_ghostify.py"} <= set(recorder.uploaded)
    assert recorder.uploaded == {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    card = ModelCard(recorder.uploaded["README.md"].decode())
    assert card.data.library_name == "transformers"
    assert 'from_pretrained("my-org/tiny-pruned", trust_remote_code=True)' in card.text
    result = json.loads(stdout)
    assert result["pushed"] == {"repo": "my-org/tiny-pruned", "url": "https://huggingface.co/my-org/tiny-pruned",
                                "revision": "v1", "commit": "abc",
                                "commit_url": "https://huggingface.co/my-org/tiny-pruned/commit/abc"}
    assert "hf_secret" not in stdout + stderr
    assert _snapshot(world) == before


def test_a_failed_upload_leaves_the_export_complete(world, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The hub answers who the token is, then goes away: one line saying how to upload later; the
    export is there, whole, and nothing was written into the input."""
    monkeypatch.setattr(huggingface_hub.HfApi, "whoami", lambda api: {"name": "someone"})
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", UNREACHABLE)
    out = tmp_path / "onnx"
    before = _snapshot(world)
    code, _, stderr = run_cli(capsys, "export", world / "pruned", "-o", out, "--format", "onnx",
                              "--push-to-hub", "my-org/tiny", "--token", "hf_secret")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code != 0 and len(errors) == 1 and "Traceback" not in stderr, stderr
    assert "cannot reach the Hugging Face Hub at http://127.0.0.1:9" in errors[0]
    assert f"the output {out} is complete: upload it later with `hf upload my-org/tiny {out}`" in errors[0]
    assert "hf_secret" not in stderr
    assert {"README.md", "config.json", "model.onnx", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert ModelCard.load(out / "README.md").data.library_name == "onnx"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["onnx"]  # no temporary directory left
    assert _snapshot(world) == before


PUSH = ["export", "{pruned}", "-o", "{out}", "--push-to-hub"]
#: (id, args, expected, hub setting): refused before the export starts (nothing written)
CASES = [
    ("repo-id-with-space", [*PUSH, "my org/name", "--token", "hf_x"], "is not a hub repository id", None),
    ("repo-id-too-deep", [*PUSH, "a/b/c", "--token", "hf_x"], "pass ORG/NAME", None),
    ("private-without-push", ["export", "{pruned}", "-o", "{out}", "--private"], "go with --push-to-hub", None),
    ("token-without-push", ["export", "{pruned}", "-o", "{out}", "--token", "hf_x"], "go with --push-to-hub", None),
    ("blank-revision", [*PUSH, "org/name", "--revision", " ", "--token", "hf_x"], "is not a branch name", None),
    ("no-token", [*PUSH, "org/name"], "needs a Hugging Face token with write access: pass --token, set HF_TOKEN",
     "no-token"),
    ("offline", [*PUSH, "org/name", "--token", "hf_x"], "HF_HUB_OFFLINE is set; unset it", "offline"),
    ("unreachable", [*PUSH, "org/name", "--token", "hf_x"], "cannot reach the Hugging Face Hub at http://127.0.0.1:9",
     "unreachable"),
    ("refused-token", [*PUSH, "org/name", "--token", "hf_revoked"], "the hub refused the token (401 Unauthorized)",
     "refusing"),
]


@pytest.mark.parametrize(("name", "args", "expected", "hub"), CASES, ids=[c[0] for c in CASES])
def test_push_refusals_are_one_line_and_change_nothing(name, args, expected, hub, world, tmp_path, capsys,  # noqa: F811
                                                       monkeypatch, request):
    if hub == "no-token":
        request.getfixturevalue("no_saved_token")
    elif hub == "offline":
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    elif hub == "unreachable":
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", UNREACHABLE)
    elif hub == "refusing":
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", request.getfixturevalue("refusing_hub"))
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(args, world, out), expected)


#: an unreachable endpoint is the full run's (its retries take seconds; every day test_messages.py's `info` meets one)
@pytest.mark.parametrize("environment", [{"HF_HUB_OFFLINE": "1"},
                                         pytest.param({"HF_ENDPOINT": UNREACHABLE}, marks=pytest.mark.slow)])
def test_the_hub_settings_of_the_environment_are_obeyed(environment, world, tmp_path):  # noqa: F811
    """What a user sets in the shell, in a fresh process: one line, before the export starts."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")}
    env.update(environment, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "ghostify", "export", str(world / "pruned"), "-o", str(tmp_path / "out"),
                             "--push-to-hub", "org/name", "--token", "hf_x"], capture_output=True, text=True, env=env,
                            cwd=REPO, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert ("HF_HUB_OFFLINE is set" if "HF_HUB_OFFLINE" in environment else "cannot reach the Hugging Face Hub") in errors[0]
    assert not (tmp_path / "out").exists()


RECIPE = """\
model: {model}
stages:
  - export: {{push_to_hub: org/name, private: true{extra}}}
"""


def test_a_recipe_pushes_through_the_export_keys_never_with_a_token(world, tmp_path, capsys, no_saved_token):  # noqa: F811
    from ghostify.recipe.schema import RecipeError
    from ghostify.recipe.run import load

    recipe = tmp_path / "push.yaml"
    recipe.write_text(RECIPE.format(model=world / "pruned", extra=", revision: v1"))
    (stage,) = load(recipe).stages
    assert stage.settings == {"push_to_hub": "org/name", "private": True, "revision": "v1"}
    recipe.write_text(RECIPE.format(model=world / "pruned", extra=", token: hf_secret"))
    with pytest.raises(RecipeError, match="unknown key 'token'"):  # a secret never goes into a recipe
        load(recipe)
    # no token: refused before the run directory is made, not after the stages before the push
    recipe.write_text(RECIPE.format(model=world / "pruned", extra=""))
    code, _, stderr = run_cli(capsys, "run", recipe, "-o", tmp_path / "run")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code != 0 and len(errors) == 1 and "needs a Hugging Face token" in errors[0], stderr
    assert not (tmp_path / "run").exists()
