"""A YAML loader with bounded cost: input bytes, nesting depth and alias expansions.

``yaml.safe_load`` builds whatever the text describes: a 656-byte "billion laughs" document
(aliases of aliases) expands to hundreds of millions of nodes, and a document nested 100,000
levels deep ends in a ``RecursionError`` deep inside PyYAML. This loader refuses both while
composing, before anything is built, with the limit in the message.
"""

from __future__ import annotations

from typing import Any

import yaml

#: manifests larger than this are refused (the API server's own limit on an object is ~1.5 MiB;
#: a multi-document file of a few objects stays well below)
MAX_MANIFEST_BYTES = 4 << 20
#: nesting depth of collections; Kubernetes objects nest ~12 levels
MAX_DEPTH = 64
#: alias references (``*name``) in one stream; real manifests use a handful
MAX_ALIASES = 100
#: nodes built from a stream, counting each alias target's nodes again where it is referenced
MAX_NODES = 250_000


class YamlLimitError(yaml.YAMLError):
    """The YAML stream exceeds one of the bounds of this module."""


def _size(node: yaml.Node, budget: int) -> int:
    """Nodes under ``node`` (iteratively), stopping once above ``budget``."""
    count = 0
    stack = [node]
    while stack and count <= budget:
        n = stack.pop()
        count += 1
        if isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
    return count


class BoundedSafeLoader(yaml.SafeLoader):
    """SafeLoader that counts depth, aliases and the nodes aliases expand to."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YamlLimitError(f"more than {MAX_ALIASES} YAML aliases")
        elif self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlLimitError(f"YAML nested deeper than {MAX_DEPTH} levels (at {mark})")
        is_collection = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        try:
            node = super().compose_node(parent, index)
        finally:
            if is_collection:
                self._depth -= 1
        return node

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None and self._aliases:
            # an alias re-uses its target's node: count the tree as it will be built
            if _size(node, MAX_NODES) > MAX_NODES:
                raise YamlLimitError(f"YAML document expands to more than {MAX_NODES} nodes")
        return node


def safe_load_all(text: str) -> list[Any]:
    """All documents of ``text`` within the bounds of this module (YamlLimitError beyond)."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise YamlLimitError(f"manifest larger than {MAX_MANIFEST_BYTES} bytes")
    loader = BoundedSafeLoader(text)
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()
