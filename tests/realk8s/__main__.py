"""``python -m tests.realk8s --kubeconfig PATH``: bring the real control plane up standalone.

Prints one line ``ready`` on stdout when kubectl can use the admin kubeconfig written to PATH and
every GPU node is Ready; tears everything down on SIGTERM or SIGINT (no process left behind).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from .cluster import DEFAULT_PRODUCT, ClusterError, RealCluster


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.realk8s", description=__doc__)
    p.add_argument(
        "--kubeconfig", required=True, type=Path, help="where to write the admin kubeconfig"
    )
    p.add_argument("--gpu-nodes", type=int, default=2, help="kwok GPU nodes (default 2)")
    p.add_argument(
        "--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default 8)"
    )
    p.add_argument(
        "--gpu-product",
        default=DEFAULT_PRODUCT,
        help=f"nvidia.com/gpu.product label of the nodes (default {DEFAULT_PRODUCT})",
    )
    p.add_argument("--workdir", type=Path, help="state and logs folder (default: a temporary one)")
    args = p.parse_args(argv)
    if args.gpu_nodes < 0 or args.gpus_per_node < 1:
        p.error("--gpu-nodes must be >= 0 and --gpus-per-node >= 1")

    stop = {"now": False}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop["now"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    own = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="realk8s-")) if own else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = RealCluster(
        workdir,
        gpu_nodes=args.gpu_nodes,
        gpus_per_node=args.gpus_per_node,
        gpu_product=args.gpu_product,
    )
    try:
        cluster.start()
        args.kubeconfig.write_text(cluster.admin_kubeconfig.read_text())
        args.kubeconfig.chmod(0o600)
        print(f"logs in {cluster.logs}", file=sys.stderr)
        print("ready", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        return 0
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.stop()
        if own and not stop.get("keep"):
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
