"""The what-if page: ``inference-capacity ui`` (:mod:`.server`; assets in ``static/``)."""
