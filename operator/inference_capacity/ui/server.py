"""``inference-capacity ui``: the what-if page and its API, on aiohttp's web server.

One code path with the CLI: ``GET /api/plan?<flags>`` turns its query into the argument list of
``inference-capacity plan ... -o json`` (each key a long flag of ``plan`` without its dashes)
and runs :func:`inference_capacity.cli.main` on it, so the body is byte for byte what the command
prints, and an error is the command's own one-line message. ``POST /api/manifest`` does the same
for ``plan - -o json`` and ``plan - -o patch`` with the posted manifest as standard input.

aiohttp is already a dependency (Kopf's, and the async Prometheus reader's), so the page adds no
package to the operator or its image; every asset (HTML, CSS, the JS that draws the charts as SVG)
is package data under ``ui/static`` and nothing is fetched from the internet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from ..api.bounded_yaml import MAX_MANIFEST_BYTES
from ..engines.versions import NEWEST_SUPPORTED
from ..units import GiB

#: ``plan`` flags the page cannot pass: output, files written or read by path, and the positional
#: FILE (a manifest is posted to /api/manifest instead)
EXCLUDED_FLAGS = frozenset(
    {
        "output",
        "chart",
        "latency-chart",
        "sweep-chart",
        "gpu-prices",
        "deployment",
        "fail-if-not-fits",
        "help",
    }
)

#: the longest query string accepted (every value the CLI takes fits in far less)
MAX_QUERY_BYTES = 8192

#: the static files served, by name (nothing else under ``ui/static`` is reachable)
STATIC_TYPES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
}

#: one plan at a time: main() writes to sys.stdout / reads sys.stdin, redirected per call
_CLI_LOCK = threading.Lock()


class QueryError(ValueError):
    """A query the CLI could not even be given (unknown key, a flag the page does not pass)."""


@dataclass(frozen=True)
class Flag:
    """One long flag of ``plan``: how the page passes it and how the form shows it."""

    name: str  # without dashes
    kind: str  # "value", "bool" or "repeat"
    help: str
    choices: tuple[str, ...] | None
    group: str


def plan_flags() -> dict[str, Flag]:
    """The long flags of ``plan``, read from the CLI's own parser (so a flag another change adds
    is accepted here, and shown on the page, without an edit)."""
    from ..cli.parser import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    plan = sub.choices["plan"]
    group_of: dict[int, str] = {}
    for g in plan._action_groups:
        for act in g._group_actions:
            group_of[id(act)] = g.title or ""
    out: dict[str, Flag] = {}
    for act in plan._actions:
        longs = [o for o in act.option_strings if o.startswith("--")]
        if not longs:
            continue
        if isinstance(act, argparse._StoreTrueAction):
            kind = "bool"
        elif isinstance(act, argparse._AppendAction):
            kind = "repeat"
        elif isinstance(act, argparse._StoreAction):
            kind = "value"
        else:
            continue
        choices = tuple(str(c) for c in act.choices) if act.choices else None
        for opt in longs:
            name = opt[2:]
            if name in EXCLUDED_FLAGS:
                continue
            out[name] = Flag(name, kind, act.help or "", choices, group_of.get(id(act), ""))
    return out


_TRUE = {"", "1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no"}


def query_to_argv(items: list[tuple[str, str]], flags: dict[str, Flag] | None = None) -> list[str]:
    """``[(key, value), ...]`` of a query string to ``plan``'s arguments (``-o json`` not
    included). ``--key=value`` form, so a value starting with a dash is a value, never a flag.
    An empty value of a value flag is left out (an empty form field)."""
    flags = plan_flags() if flags is None else flags
    argv: list[str] = []
    seen: set[str] = set()
    for key, value in items:
        flag = flags.get(key)
        if flag is None:
            raise QueryError(f"unknown parameter {key!r}: not a flag of `plan` the page passes")
        if flag.kind == "bool":
            v = value.strip().lower()
            if v in _TRUE:
                argv.append(f"--{key}")
            elif v not in _FALSE:
                raise QueryError(f"{key} is a switch: give 1/true or 0/false, got {value!r}")
            continue
        if flag.kind == "value":
            if key in seen:
                raise QueryError(f"{key} given twice (only cohort and gpu-price repeat)")
            seen.add(key)
        if value == "":
            continue
        argv.append(f"--{key}={value}")
    return argv


@dataclass(frozen=True)
class CliRun:
    code: int
    stdout: str
    stderr: str

    @property
    def error_line(self) -> str:
        """The CLI's message: stderr from its last ``inference-capacity...: error:`` line on
        (argparse prints its usage before it; a YAML error quotes the line after it)."""
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        starts = [n for n, x in enumerate(lines) if x.startswith("inference-capacity")]
        if not lines:
            return f"exit status {self.code}"
        return "\n".join(lines[starts[-1] if starts else -1 :])


def run_cli(argv: list[str], stdin: bytes | None = None) -> CliRun:
    """``inference-capacity ARGV`` in this process: :func:`inference_capacity.cli.main` with its
    standard streams captured, as the command prints them."""
    from ..cli import main

    out, err = io.StringIO(), io.StringIO()
    with _CLI_LOCK:
        old_stdin = sys.stdin
        if stdin is not None:
            sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exc:  # argparse: usage and a one-line error, status 2
                    code = exc.code if isinstance(exc.code, int) else 2
        finally:
            sys.stdin = old_stdin
    return CliRun(code, out.getvalue(), err.getvalue())


def _static(name: str) -> bytes:
    return resources.files("inference_capacity.ui").joinpath("static", name).read_bytes()


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


async def index(request: web.Request) -> web.Response:
    return web.Response(body=_static("index.html"), content_type="text/html", charset="utf-8")


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC_TYPES:
        raise web.HTTPNotFound()
    return web.Response(body=_static(name), content_type=STATIC_TYPES[name], charset="utf-8")


async def api_plan(request: web.Request) -> web.Response:
    """What ``plan <flags> -o json`` prints, as it prints it; 400 with the CLI's one-line error
    when it prints nothing (exit status in ``X-Exit-Code``)."""
    if len(request.query_string.encode()) > MAX_QUERY_BYTES:
        return _error(413, f"query longer than {MAX_QUERY_BYTES} bytes")
    try:
        argv = ["plan", *query_to_argv(list(request.query.items())), "-o", "json"]
    except QueryError as exc:
        return _error(400, f"inference-capacity: error: {exc}")
    run = await asyncio.get_running_loop().run_in_executor(None, run_cli, argv)
    headers = {"X-Exit-Code": str(run.code)}
    if not run.stdout.strip():
        return _error(400, run.error_line, exit_code=run.code)
    return web.Response(
        text=run.stdout, content_type="application/json", charset="utf-8", headers=headers
    )


async def api_manifest(request: web.Request) -> web.Response:
    """``plan - -o json`` and ``plan - -o patch`` of the posted manifest (at most
    MAX_MANIFEST_BYTES, the CLI's own bound)."""
    if request.content_length is not None and request.content_length > MAX_MANIFEST_BYTES:
        return _error(413, f"manifest larger than {MAX_MANIFEST_BYTES} bytes")
    body = bytearray()
    async for chunk in request.content.iter_chunked(65536):
        body += chunk
        if len(body) > MAX_MANIFEST_BYTES:
            return _error(413, f"manifest larger than {MAX_MANIFEST_BYTES} bytes")
    loop = asyncio.get_running_loop()
    plan = await loop.run_in_executor(None, run_cli, ["plan", "-", "-o", "json"], bytes(body))
    patch = await loop.run_in_executor(None, run_cli, ["plan", "-", "-o", "patch"], bytes(body))
    result: dict[str, Any] = {
        "json_exit_code": plan.code,
        "patch": patch.stdout,
        "patch_exit_code": patch.code,
        "patch_message": patch.error_line if patch.stderr.strip() else None,
    }
    if plan.stdout.strip():
        result["plan"] = json.loads(plan.stdout)
    else:
        result["error"] = plan.error_line
    return web.json_response(result, status=200 if "plan" in result else 400)


async def api_meta(request: web.Request) -> web.Response:
    """What the form offers: the catalog's models and GPUs, the CLI's flags and defaults."""
    from ..hardware import list_gpus
    from ..model import catalog_names

    flags = plan_flags()
    return web.json_response(
        {
            "models": list(catalog_names()),
            "gpus": [{"name": g.name, "gib": round(g.total_bytes / GiB, 2)} for g in list_gpus()],
            "newest_engine_version": NEWEST_SUPPORTED,
            "max_manifest_bytes": MAX_MANIFEST_BYTES,
            "flags": [
                {
                    "name": f.name,
                    "kind": f.kind,
                    "help": f.help,
                    "choices": list(f.choices) if f.choices else None,
                    "group": f.group,
                }
                for f in flags.values()
            ],
        }
    )


@web.middleware
async def _headers(request: web.Request, handler: Any) -> web.StreamResponse:
    resp: web.StreamResponse = await handler(request)
    # every asset is the package's own: the page may load nothing from elsewhere
    resp.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'"
    )
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Cache-Control"] = "no-store"
    return resp


def make_app() -> web.Application:
    app = web.Application(middlewares=[_headers], client_max_size=MAX_MANIFEST_BYTES + 1)
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/plan", api_plan)
    app.router.add_post("/api/manifest", api_manifest)
    app.router.add_get("/api/meta", api_meta)
    return app


def serve(host: str, port: int) -> int:
    """Serve until interrupted (SIGINT/SIGTERM)."""
    print(f"inference-capacity ui: http://{host}:{port}/", file=sys.stderr, flush=True)
    web.run_app(make_app(), host=host, port=port, print=None, access_log=None)
    return 0
