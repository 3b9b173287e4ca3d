"""Pushing a finished output to the Hugging Face Hub (``export --push-to-hub ORG/NAME``).

What can be checked without the hub is checked before any work (the repository id, a token, that
``HF_HUB_OFFLINE`` is not set), and the hub is asked who the token belongs to before a long export
starts. The upload itself is one ``HfApi.upload_folder`` commit of the finished local directory,
after ``create_repo(exist_ok=True)``: the hub shows either the whole folder or nothing of it, and
the local output stays complete whatever happens, with a one-line error that says how to upload
it later.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import GhostifyError


@dataclass(frozen=True)
class HubTarget:
    repo: str
    private: bool = False
    revision: str | None = None  # a branch; created from main when it does not exist
    token: str | None = None  # None: huggingface_hub's own (HF_TOKEN, then `hf auth login`'s)

    def __repr__(self) -> str:  # never print the token
        return f"HubTarget(repo={self.repo!r}, private={self.private}, revision={self.revision!r})"


def hub_target(repo: str, *, private: bool = False, revision: str | None = None, token: str | None = None,
               reach: bool = True) -> HubTarget:
    """The repository to push to, refused in one line before any work: a malformed id, no token,
    offline mode; with ``reach``, also an unreachable hub or a token it refuses (``whoami``)."""
    import huggingface_hub  # deferred: transformers brings it, with its import time
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise GhostifyError(f"--push-to-hub {repo!r} is not a hub repository id ({exc}); pass ORG/NAME, e.g. "
                            "my-org/minilm-pruned") from None
    if revision is not None and (not revision.strip() or revision != revision.strip()):
        raise GhostifyError(f"--revision {revision!r} is not a branch name; pass e.g. main or v2")
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise GhostifyError("--push-to-hub needs the Hugging Face Hub, but HF_HUB_OFFLINE is set; unset it "
                            "(or export without --push-to-hub)")
    token = token or huggingface_hub.get_token()
    if not token:
        raise GhostifyError("--push-to-hub needs a Hugging Face token with write access: pass --token, set HF_TOKEN, "
                            "or log in with `hf auth login`")
    target = HubTarget(repo, private=private, revision=revision, token=token)
    if reach:
        _call(target, None, lambda api: api.whoami())
    return target


def push_folder(folder: Path, target: HubTarget, *, message: str) -> dict[str, Any]:
    """Upload ``folder`` as one commit to ``target`` (the repository created first when it does not
    exist, private if asked); returns where it went. ``folder`` is only read."""
    url = _call(target, folder, lambda api: api.create_repo(target.repo, repo_type="model", exist_ok=True,
                                                             private=True if target.private else None))
    if target.revision is not None:
        _call(target, folder, lambda api: api.create_branch(target.repo, branch=target.revision, repo_type="model",
                                                             exist_ok=True))
    commit = _call(target, folder, lambda api: api.upload_folder(repo_id=target.repo, folder_path=str(folder),
                                                                  repo_type="model", revision=target.revision,
                                                                  commit_message=message))
    return {"repo": target.repo, "url": str(url), "revision": target.revision or "main",
            "commit": getattr(commit, "oid", None), "commit_url": getattr(commit, "commit_url", None)}


def _call(target: HubTarget, folder: Path | None, request):
    """``request(api)``, its failure as one line (``folder``: the finished output, to upload later)."""
    import huggingface_hub  # deferred

    api = huggingface_hub.HfApi(token=target.token)
    try:
        return request(api)
    except Exception as exc:  # the hub's and the network's errors share no class
        raise hub_error(exc, target, folder) from None


def hub_error(exc: Exception, target: HubTarget, folder: Path | None) -> GhostifyError:
    """What went wrong talking to the hub, and what to do, in one line."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    status = getattr(getattr(exc, "response", None), "status_code", None)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    if isinstance(exc, OfflineModeIsEnabled):
        what = "HF_HUB_OFFLINE is set; unset it to push"
    elif status == 401:
        what = ("the hub refused the token (401 Unauthorized); pass a valid --token or HF_TOKEN with write access, or "
                "log in again with `hf auth login`")
    elif status == 403:
        what = f"the token may not write to {target.repo} (403 Forbidden); use a token with write access to it"
    elif isinstance(exc, HfHubHTTPError) and status is not None:
        what = f"the hub answered {status} ({first})"
    else:
        what = (f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} ({type(exc).__name__}: {first}); check "
                "the network, or HF_ENDPOINT")
    branch = f" --revision {target.revision}" if target.revision else ""
    later = (f"; the output {folder} is complete: upload it later with `hf upload {target.repo} {folder}{branch}`"
             if folder else "")
    return GhostifyError(f"--push-to-hub {target.repo}: {what}{later}")


__all__ = ["HubTarget", "hub_error", "hub_target", "push_folder"]
