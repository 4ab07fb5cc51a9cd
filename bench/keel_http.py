"""Keel's HTTP side alone: ``create_app(config, workers=False)`` under uvicorn.

``python -m bench.keel_http --config FILE`` serves exactly what ``keel serve`` serves (the
webhook routes, API, health, the outbox that sends acknowledgements) but claims no tasks,
so the ingest benchmark measures the request path and not the executor working off the
backlog it creates. Same uvicorn settings as the baseline (``bench.bare_ingest``).
"""

from __future__ import annotations

import argparse
import sys

import uvicorn

from adapters.config import load_config
from adapters.web.app import create_app


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    config = load_config(args.config)
    uvicorn.run(
        create_app(config, workers=False), host=config.server.host, port=config.server.port,
        log_level="warning", access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
