"""The real ``inference-capacity ui`` process on a free loopback port, for the page's tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: the console script of the installed package (the entry point users run)
CLI = str(Path(sys.executable).with_name("inference-capacity"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``inference-capacity plan ARGS`` as a separate process, as users run it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [CLI, "plan", *args], capture_output=True, text=True, timeout=120, env=env, input=stdin
    )


@contextmanager
def ui_server() -> Iterator[str]:
    """Start ``inference-capacity ui --port P``; yield its base URL; SIGTERM it after."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [CLI, "ui", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ui exited {proc.returncode}: {proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(base + "/api/meta", timeout=5) as r:
                    json.load(r)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
