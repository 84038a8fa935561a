"""vLLM's source distributions from PyPI, through pip, cached outside the work tree.

``pip download --no-binary :all: --no-deps vllm==X`` fetches the sdist and then prepares its
metadata, which for vLLM means installing its build requirements (torch, CUDA tooling): minutes
and gigabytes for a tarball we only read. So pip runs with a private ``TMPDIR``; as soon as the
tarball is complete in pip's unpack folder (pip says it moves on to the build step), it is
copied into the cache and that pip process (our own child) is stopped. A version already in the
cache is not fetched again.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("VLLM_SDIST_CACHE", "~/.cache/inference-capacity/vllm-sdist"))
CACHE = CACHE.expanduser()
#: pip's log lines after the download is complete
_AFTER_DOWNLOAD = re.compile(
    r"Installing build dependencies|Preparing metadata|Getting requirements"
)


def released_versions(first: tuple[int, int] = (0, 11)) -> list[str]:
    """Every final vLLM release from ``first`` on, as PyPI lists them (``pip index versions``)."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("Available versions:"))
    versions = [v.strip() for v in line.split(":", 1)[1].split(",")]
    finals = [v for v in versions if re.fullmatch(r"\d+\.\d+\.\d+", v)]
    keep = [v for v in finals if tuple(int(x) for x in v.split(".")[:2]) >= first]
    return sorted(keep, key=lambda v: tuple(int(x) for x in v.split(".")))


class NoSdist(LookupError):
    """PyPI has wheels only for this release (0.15.0 and 0.15.1)."""


def sdist(version: str, timeout: float = 900.0) -> Path:
    """The cached ``vllm-X.tar.gz``, fetched with pip when missing; :class:`NoSdist` when PyPI
    has no source distribution of it (remembered in the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / f"vllm-{version}.tar.gz"
    missing = CACHE / f"vllm-{version}.no-sdist"
    if target.exists():
        return target
    if missing.exists():
        raise NoSdist(version)
    with tempfile.TemporaryDirectory(prefix="vllm-sdist-") as tmp:
        log_path = Path(tmp) / "pip.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-binary",
                    ":all:",
                    "--no-deps",
                    f"vllm=={version}",
                    "-d",
                    str(Path(tmp) / "dl"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TMPDIR": tmp},
                start_new_session=True,  # its build-step children stop with it
            )
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                done = list(Path(tmp).glob(f"dl/vllm-{version}.tar.gz"))
                unpacked = list(Path(tmp).glob(f"pip-unpack-*/vllm-{version}.tar.gz"))
                if done:
                    shutil.copy(done[0], target)
                    break
                if unpacked and _AFTER_DOWNLOAD.search(log_path.read_text()):
                    partial = target.with_suffix(".part")
                    shutil.copy(unpacked[0], partial)
                    partial.rename(target)
                    break
                if proc.poll() is not None and not done:
                    if "No matching distribution" in log_path.read_text():
                        missing.touch()
                        raise NoSdist(version)
                    raise RuntimeError(f"pip download vllm=={version}: {log_path.read_text()}")
                time.sleep(1)
            else:
                raise TimeoutError(f"pip download vllm=={version}: no tarball in {timeout:g} s")
        finally:
            _stop(proc)
    with tarfile.open(target) as tar:  # a truncated copy fails here, not later
        tar.getmembers()
    return target


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop our pip and the build processes it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def read_sources(version: str, wanted: re.Pattern[str]) -> dict[str, str]:
    """``{path inside vllm/: text}`` for the files of the sdist whose path matches ``wanted``."""
    out: dict[str, str] = {}
    with tarfile.open(sdist(version)) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) == 2 and member.isfile() and wanted.fullmatch(parts[1]):
                f = tar.extractfile(member)
                assert f is not None
                out[parts[1]] = f.read().decode("utf-8")
    return out


if __name__ == "__main__":
    for v in sys.argv[1:] or released_versions():
        try:
            print(v, sdist(v))
        except NoSdist:
            print(v, "no sdist on PyPI")
