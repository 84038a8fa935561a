"""``inference-capacity run``: start the Kopf operator with health and metrics endpoints."""

from __future__ import annotations

import logging
import os
import sys

import kopf
from prometheus_client import start_http_server


def run_operator(
    namespaces: list[str],
    standalone: bool,
    peering: str | None,
    liveness: str,
    metrics_port: int,
    verbose: bool,
    priority: int | None = None,
    prometheus_allowed_url_prefixes: list[str] | None = None,
) -> int:
    if priority is not None:
        os.environ["INFERENCE_CAPACITY_PEERING_PRIORITY"] = str(priority)
    if prometheus_allowed_url_prefixes:
        from .observing import ALLOWED_URL_PREFIXES_ENV

        for prefix in prometheus_allowed_url_prefixes:
            if not prefix.startswith(("http://", "https://")) or "," in prefix:
                raise ValueError(
                    f"--prometheus-allowed-url-prefix: {prefix!r} is not an http(s):// prefix"
                )
        os.environ[ALLOWED_URL_PREFIXES_ENV] = ",".join(prometheus_allowed_url_prefixes)
    from . import handlers  # noqa: F401  (registers the handlers)

    # kopf.configure() sets up logging (one line per record); no second handler here
    logging.getLogger("inference_capacity").setLevel(logging.DEBUG if verbose else logging.INFO)
    if metrics_port:
        start_http_server(metrics_port)
    # every line Kopf logs about an object starts with [namespace/name]
    kopf.configure(verbose=verbose, log_prefix=True)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=standalone or peering is None,
        peering_name=peering,
        liveness_endpoint=liveness or None,
    )
    # Kopf has stopped (gracefully, or its exit timeout passed). Prometheus queries still in
    # flight would keep the interpreter joining their threads for as long as a slow Prometheus
    # takes: they are abandoned (every write is idempotent and carries its resourceVersion).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
