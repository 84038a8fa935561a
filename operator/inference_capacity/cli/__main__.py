"""``python -m inference_capacity.cli``: the same as the ``inference-capacity`` command."""

from . import main

raise SystemExit(main())
