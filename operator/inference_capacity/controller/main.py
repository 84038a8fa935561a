"""``inference-capacity run``: start the Kopf operator with health and metrics endpoints."""

from __future__ import annotations

import logging

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
) -> int:
    import os

    if priority is not None:
        os.environ["INFERENCE_CAPACITY_PEERING_PRIORITY"] = str(priority)
    from . import handlers  # noqa: F401  (registers the handlers)

    # kopf.configure() sets up logging (one line per record); no second handler here
    logging.getLogger("inference_capacity").setLevel(logging.DEBUG if verbose else logging.INFO)
    if metrics_port:
        start_http_server(metrics_port)
    kopf.configure(verbose=verbose)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=standalone or peering is None,
        peering_name=peering,
        liveness_endpoint=liveness or None,
    )
    return 0
