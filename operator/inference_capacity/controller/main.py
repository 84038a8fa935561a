"""``inference-capacity run``: start the Kopf operator with health and metrics endpoints."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

from ..settings import Settings, configure


def run_operator(config: Settings) -> int:
    """Run Kopf with ``config`` (the environment's settings and the flags of ``run``)."""
    from .allocator import tune

    tune()  # before any thread allocates (see allocator)
    configure(config)
    from ..sizing.distribution import keep_pools

    # each resource's plan is memoised (planner.planned): a workload's Monte Carlo draws (tens
    # of MB) are held only while a plan uses them, not kept for a plan that is not made again
    keep_pools(0)
    from .bodies import install

    install()  # Kopf's watched bodies without managedFields (see bodies)
    from . import k8s, shards

    if config.shards > 1:
        shards.placement(config)  # a missing shard index or Lease namespace: one line, no start

    # one clear line, not Kopf's retry loop of tracebacks, when there is no cluster
    where = k8s.preflight()
    from . import handlers  # noqa: F401  (registers the handlers)

    # kopf.configure() sets up logging (one line per record); no second handler here
    level = logging.DEBUG if config.verbose else logging.INFO
    logging.getLogger("inference_capacity").setLevel(level)
    if config.metrics_port:
        start_http_server(config.metrics_port)
    # every line Kopf logs about an object starts with [namespace/name]
    kopf.configure(verbose=config.verbose, log_prefix=True)
    logging.getLogger("inference_capacity").info("cluster: %s", where)
    from .refresher import IDENTITY

    kopf.run(
        identity=cast(Any, IDENTITY),
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        standalone=config.standalone or config.peering is None,
        peering_name=config.peering,
        liveness_endpoint=config.liveness or None,
    )
    # Kopf has stopped (gracefully, or its exit timeout passed). Prometheus queries still in
    # flight would keep the interpreter joining their threads for as long as a slow Prometheus
    # takes: they are abandoned (every write is idempotent and carries its resourceVersion).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
