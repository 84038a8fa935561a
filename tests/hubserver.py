"""A local stand-in for the part of the Hugging Face Hub that ``huggingface_hub`` uses here.

Point ``HF_ENDPOINT`` at :attr:`HubServer.url`. It answers, as huggingface.co does
(huggingface_hub/hf_api.py ``model_info``, file_download.py ``get_hf_file_metadata`` /
``hf_hub_download``, hf_api.py ``parse_safetensors_file_metadata``):

- ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=true``): model info with ``sha`` and
  ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs`` for LFS files);
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: small files answer 200 with ``ETag``,
  ``X-Repo-Commit`` and ``Content-Length``; LFS files (``*.safetensors``) answer 302 to a blob
  URL on the same host with ``X-Linked-Etag``, ``X-Linked-Size`` and ``X-Repo-Commit``; the blob
  URL honours ``Range: bytes=a-b`` with 206 and ``Content-Range``;
- errors with the ``X-Error-Code`` header ``hf_raise_for_status`` reads: an unknown repository
  401 ``RepoNotFound`` (404 with a token), a gated one's files 401 ``GatedRepo`` without a
  token and 403 with a token that has no access (its model info is public, as on
  huggingface.co), an unknown revision 404 ``RevisionNotFound``, an unknown file
  404 ``EntryNotFound``.

Files are served from disk (``Path``) or memory (``bytes``), so a shard can be a sparse file:
the real header, then a seek past the data. Every request is recorded in :attr:`requests`.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


@dataclass
class Commit:
    sha: str
    files: dict[str, Path | bytes]


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, Commit] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit sha
    gated: bool = False
    tokens: set[str] = field(default_factory=set)  # tokens granted access (gated repos)


def _size(content: Path | bytes) -> int:
    return content.stat().st_size if isinstance(content, Path) else len(content)


def _etag(commit: str, name: str, content: Path | bytes) -> str:
    return hashlib.sha256(f"{commit}/{name}/{_size(content)}".encode()).hexdigest()


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.fail_with: int | None = None  # answer every request with this status
        self.delays: dict[str, float] = {}  # repo id -> seconds before its model info answers
        handler = _make_handler(self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HubServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(
        self,
        repo_id: str,
        files: dict[str, Path | bytes],
        *,
        ref: str = "main",
        sha: str | None = None,
        gated: bool = False,
        tokens: set[str] | None = None,
    ) -> str:
        """Publish ``files`` as a commit of ``repo_id`` that ``ref`` points at; its sha."""
        repo = self.repos.setdefault(repo_id, Repo(repo_id))
        repo.gated = repo.gated or gated
        repo.tokens |= tokens or set()
        if sha is None:
            digest = hashlib.sha1(repo_id.encode())
            for name in sorted(files):
                digest.update(name.encode())
                digest.update(str(_size(files[name])).encode())
            digest.update(str(len(repo.commits)).encode())
            sha = digest.hexdigest()
        repo.commits[sha] = Commit(sha, dict(files))
        repo.refs[ref] = sha
        return sha

    def count(self, method: str, pattern: str) -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.requests if m == method and re.search(pattern, p))


def _make_handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        # -- helpers --------------------------------------------------------------------------
        def _send(
            self,
            status: int,
            body: bytes = b"",
            headers: dict[str, str] | None = None,
            *,
            head: bool = False,
            length: int | None = None,
        ) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, head: bool) -> None:
            body = json.dumps({"error": message}).encode()
            self._send(
                status,
                b"" if head else body,
                {
                    "X-Error-Code": code,
                    "X-Error-Message": message,
                    "Content-Type": "application/json",
                },
                head=head,
                length=0 if head else None,
            )

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization") or ""
            return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None

        def _repo(self, repo_id: str, head: bool, gate: bool = True) -> Repo | None:
            repo = hub.repos.get(repo_id)
            token = self._token()
            if repo is None:
                if token:
                    self._error(404, "RepoNotFound", "Repository not found", head)
                else:
                    self._error(401, "RepoNotFound", "Invalid username or password.", head)
                return None
            if gate and repo.gated and token not in repo.tokens:
                if token is None:
                    self._error(
                        401,
                        "GatedRepo",
                        "Access to model is restricted. You must have access to it and be "
                        "authenticated to access it. Please log in.",
                        head,
                    )
                else:
                    self._error(
                        403,
                        "GatedRepo",
                        "Access to model is restricted and you are not in the authorized list.",
                        head,
                    )
                return None
            return repo

        def _commit(self, repo: Repo, rev: str, head: bool) -> Commit | None:
            sha = repo.refs.get(rev, rev)
            commit = repo.commits.get(sha)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return commit

        # -- routes ---------------------------------------------------------------------------
        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        def _route(self, head: bool) -> None:
            path = urlsplit(self.path).path
            with hub.lock:
                hub.requests.append((self.command, path, dict(self.headers)))
            if hub.fail_with is not None:
                self._error(hub.fail_with, "", "unavailable", head)
                return
            m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$", path)
            if m:
                self._model_info(unquote(m.group(1)), unquote(m.group(2) or "main"), head)
                return
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                self._resolve(unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3)), head)
                return
            m = re.match(r"^/_blobs/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$", path)
            if m:
                self._blob(unquote(m.group(1)), m.group(2), unquote(m.group(3)), head)
                return
            self._error(404, "", f"no route for {path}", head)

        def _model_info(self, repo_id: str, rev: str, head: bool) -> None:
            delay = hub.delays.get(repo_id)
            if delay:
                time.sleep(delay)
            # as on huggingface.co, a gated repository's model info is public; its files are not
            repo = self._repo(repo_id, head, gate=False)
            if repo is None:
                return
            commit = self._commit(repo, rev, head)
            if commit is None:
                return
            siblings = []
            for name, content in sorted(commit.files.items()):
                sib: dict[str, Any] = {
                    "rfilename": name,
                    "size": _size(content),
                    "blobId": _etag(commit.sha, name, content)[:40],
                }
                if name.endswith(LFS_SUFFIXES):
                    sib["lfs"] = {
                        "size": _size(content),
                        "sha256": _etag(commit.sha, name, content),
                        "pointerSize": 134,
                    }
                siblings.append(sib)
            body = json.dumps(
                {
                    "_id": commit.sha[:24],
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": commit.sha,
                    "private": False,
                    "gated": "manual" if repo.gated else False,
                    "disabled": False,
                    "tags": [],
                    "siblings": siblings,
                }
            ).encode()
            self._send(200, body, {"Content-Type": "application/json"}, head=head)

        def _resolve(self, repo_id: str, rev: str, name: str, head: bool) -> None:
            repo = self._repo(repo_id, head)
            if repo is None:
                return
            commit = self._commit(repo, rev, head)
            if commit is None:
                return
            content = commit.files.get(name)
            if content is None:
                self._error(404, "EntryNotFound", f"{name} does not exist", head)
                return
            etag = _etag(commit.sha, name, content)
            if name.endswith(LFS_SUFFIXES):
                self._send(
                    302,
                    b"",
                    {
                        "Location": f"/_blobs/{repo_id}/{commit.sha}/{name}",
                        "X-Repo-Commit": commit.sha,
                        "X-Linked-Etag": f'"{etag}"',
                        "X-Linked-Size": str(_size(content)),
                        "ETag": f'"{etag[:40]}"',
                    },
                    head=head,
                )
                return
            data = content.read_bytes() if isinstance(content, Path) else content
            self._send(
                200,
                data,
                {
                    "X-Repo-Commit": commit.sha,
                    "ETag": f'"{etag}"',
                    "Content-Type": "application/octet-stream",
                    "Accept-Ranges": "bytes",
                },
                head=head,
            )

        def _blob(self, repo_id: str, sha: str, name: str, head: bool) -> None:
            repo = hub.repos.get(repo_id)
            commit = repo.commits.get(sha) if repo else None
            content = commit.files.get(name) if commit else None
            if content is None:
                self._error(404, "EntryNotFound", "no such blob", head)
                return
            size = _size(content)
            rng = self.headers.get("Range") or self.headers.get("range")
            start, end = 0, size - 1
            status = 200
            if rng:
                m = re.match(r"bytes=(\d+)-(\d*)$", rng.strip())
                if not m:
                    self._error(416, "", f"bad range {rng}", head)
                    return
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
                status = 206
                if start >= size:
                    self._error(416, "", "range not satisfiable", head)
                    return
            length = end - start + 1
            headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
            if status == 206:
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            if head:
                self._send(status, b"", headers, head=True, length=length)
                return
            if length > 64 * 1024 * 1024:
                self._error(413, "", "the test Hub serves at most 64 MiB per request", head)
                return
            if isinstance(content, Path):
                with content.open("rb") as fh:
                    fh.seek(start)
                    data = fh.read(length)
            else:
                data = content[start : end + 1]
            self._send(status, data, headers)

    return Handler
