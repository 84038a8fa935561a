"""vLLM version strings and the memory-budget era each one belongs to.

vLLM's KV budget changed meaning between releases (vLLM's
v1/worker/gpu_worker.py::determine_available_memory and utils/mem_utils.py per release): the
init snapshot moved after NCCL init in 0.11, the CUDA-graph estimate is subtracted from 0.20
(and the default utilization went from 0.90 to 0.92), and from 0.27 the budget is ``requested −
consumed − transient − CG estimate``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")
#: what follows the release in a pre-release's version (PEP 440: a1, b2, rc1, .dev5, rc1.dev16)
_PRERELEASE_RE = re.compile(r"^[-_.]?(a|alpha|b|beta|c|rc|pre|preview|dev)\d*", re.IGNORECASE)

#: the newest vLLM release whose budget rules were checked against vLLM's source
NEWEST_SUPPORTED = "0.33.0"


#: vLLM's first release (June 2023); nothing below it was ever published
FIRST_RELEASE = (0, 1, 0)
#: no vLLM minor line has had more than a handful of patch releases (0.2.7, 0.6.6)
MAX_PATCH = 20
_NEWEST_KEY = tuple(int(x) for x in NEWEST_SUPPORTED.split("."))


class Era(enum.Enum):
    V0 = "v0"  # V0 engine (≤ 0.10): determine_num_available_blocks
    V1_EARLY = "v1-0.8"  # 0.7–0.8 V1: absolute peak, no "Available KV cache memory" line
    V1_PRE_NCCL = "v1-0.9"  # 0.9–0.10 V1: init snapshot before NCCL (NCCL counted)
    V1_NO_CG = "v1-0.11"  # 0.11–0.19: CUDA graphs outside the budget
    V1_CG = "v1-0.20"  # 0.20–0.26: CUDA-graph estimate subtracted, default u 0.92
    V1_CONSUMED = "v1-0.27"  # ≥ 0.27: consumed + transient + CG estimate


@dataclass(frozen=True, slots=True, order=True)
class Version:
    major: int
    minor: int
    patch: int
    text: str = ""

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}.{self.patch}"

    @property
    def prerelease(self) -> bool:
        """A build before its release (``0.20.1rc1.dev16+g7a1eb8ac2``: an rc, alpha, beta or
        dev build of 0.20.1), which :attr:`key` counts as that release; a ``.post`` release or
        a local ``+cu128`` tag is not one."""
        m = _VERSION_RE.match(self.text.strip()) if self.text else None
        return bool(m and _PRERELEASE_RE.match(m.group(5)))


class VersionError(ValueError):
    pass


def parse_version(text: str) -> Version:
    """Parse what vLLM reports: ``0.6.4.post1``, ``0.10.1.dev101+gbda9d0535``, ``v0.19.0``,
    ``0.19`` (a minor line: its first release)."""
    m = _VERSION_RE.match(text.strip())
    if not m:
        raise VersionError(
            f"engine version: cannot parse {text!r} (expected a vLLM version like 0.19.0)"
        )
    major, minor = int(m.group(1)), int(m.group(2))
    patch = int(m.group(3) or 0)
    if major != 0:
        raise VersionError(f"engine version: {text!r} is not a vLLM 0.x version")
    v = Version(major, minor, patch, text.strip())
    newest = _NEWEST_KEY
    if v.key < FIRST_RELEASE or minor > newest[1] or patch > MAX_PATCH:
        raise VersionError(
            f"engine version: {text!r} is not a released vLLM version (releases run from "
            f"{'.'.join(map(str, FIRST_RELEASE))} to the {newest[0]}.{newest[1]} line; patch "
            f"releases at most .{MAX_PATCH})"
        )
    return v


def era_of(version: Version, engine: str | None = None) -> Era:
    """The budget era. ``engine`` 'v0' forces the V0 engine where it still existed (≤ 0.10)."""
    k = version.key
    if engine == "v0":
        if k >= (0, 11, 0):
            raise VersionError(f"engine v0: vLLM {version} has no V0 engine (removed in 0.11)")
        return Era.V0
    if k < (0, 7, 0):
        return Era.V0
    if k < (0, 8, 0) and engine != "v1":
        return Era.V0  # V1 was opt-in (VLLM_USE_V1=1) before 0.8
    if k < (0, 9, 0):
        return Era.V1_EARLY
    if k < (0, 11, 0):
        return Era.V1_PRE_NCCL
    if k < (0, 20, 0):
        return Era.V1_NO_CG
    if k < (0, 27, 0):
        return Era.V1_CG
    return Era.V1_CONSUMED
