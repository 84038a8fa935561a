"""``python -m tests.kubeapi --port PORT --kubeconfig PATH [-v]``: serve until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .server import KubeAPIServer


async def serve(args: argparse.Namespace) -> None:
    server = KubeAPIServer(
        args.host, args.port, verbose=args.verbose, bookmark_interval=args.bookmark_interval
    )
    await server.start_async()
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig, args.namespace)
    print(f"kubeapi serving on {server.url}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop_async()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kubeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("--namespace", default="default", help="the kubeconfig's namespace")
    parser.add_argument("--bookmark-interval", type=float, default=30.0)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
