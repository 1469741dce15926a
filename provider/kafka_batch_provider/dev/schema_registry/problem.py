"""One reason a reader cannot read a writer's data: what every compatibility rule returns.

Its own module, below the rules (``avro_resolution``, ``json_subschema``, ``protobuf_diff``) and
``compatibility``, which runs them: each imports it, none imports another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One reason a reader cannot read a writer's data; ``text`` says "the reader"/"the writer"."""

    kind: str
    path: str
    text: str

    def message(self, reader: str, writer: str) -> str:
        text = self.text.replace("the reader", reader).replace("the writer", writer)
        return f"{{errorType:'{self.kind}', description:'{text}', path:'{self.path}'}}"
