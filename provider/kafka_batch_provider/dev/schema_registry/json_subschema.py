"""JSON Schema compatibility for the embedded schema registry: is the writer's schema within the reader's?

A reader reads a writer's data when every document valid against the writer's schema is valid
against the reader's. Compared: types (integer fits number), ``enum``/``const``, string, number
and array bounds, ``items``, properties against ``additionalProperties`` (an open model accepts
any extra property, a closed one none), ``required`` (a newly required property with a
``default`` passes, as in Confluent's rules), ``anyOf``/``oneOf``/``allOf`` branch by branch,
``$ref`` within the document or to a reference. Not compared: ``patternProperties``,
``dependencies``, ``if``/``then``, ``not``, ``pattern`` beyond equality, ``format``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_batch_provider.dev.schema_registry.formats import ParsedSchema
from kafka_batch_provider.dev.schema_registry.problem import Problem

JSON_TYPES = {"null", "boolean", "object", "array", "number", "integer", "string"}
Node = tuple[Any, Any]  # (a schema, the document its local $refs point into)


class JsonSubschema:
    """Does every document valid against the writer's schema validate against the reader's?"""

    def __init__(self, reader: ParsedSchema, writer: ParsedSchema) -> None:
        self.documents = {id(reader.model): reader.context, id(writer.model): writer.context}
        self.in_progress: set[tuple[int, int]] = set()

    def deref(self, node: Node) -> Node:
        schema, root = node
        for _ in range(32):  # a $ref chain ends; a cycle of bare $refs is cut here
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                break
            target, _, pointer = schema["$ref"].partition("#")
            if target:
                documents = self.documents.get(id(root)) or next(iter(self.documents.values()))
                root = documents.get(target, True)
                self.documents.setdefault(id(root), documents)
            schema = root
            for part in filter(None, pointer.split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                schema = schema.get(part, True) if isinstance(schema, dict) else True
        return schema, root

    @staticmethod
    def types(schema: dict) -> set[str]:
        declared = schema.get("type")
        if declared is None:
            return set(JSON_TYPES)
        return {declared} if isinstance(declared, str) else set(declared)

    def check(self, writer: Node, reader: Node, path: str) -> list[Problem]:
        writer, reader = self.deref(writer), self.deref(reader)
        w, r = writer[0], reader[0]
        if r is True or r == {} or w is False:
            return []
        if r is False:
            return [Problem("SCHEMA_NARROWED", path, "the reader accepts nothing the writer writes")]
        if w is True:
            w = {}
        pair = (id(w), id(r))
        if pair in self.in_progress:
            return []
        self.in_progress.add(pair)
        try:
            return self.check_combined(w, writer[1], r, reader[1], path)
        finally:
            self.in_progress.discard(pair)

    def check_combined(self, w: dict, w_root: Any, r: dict, r_root: Any, path: str) -> list[Problem]:
        for keyword in ("anyOf", "oneOf"):
            if keyword in w:  # each way the writer may write must be readable
                found = []
                for index, branch in enumerate(w[keyword]):
                    rest = {k: v for k, v in w.items() if k != keyword}
                    found += self.check(({**rest, "allOf": [branch]}, w_root), (r, r_root), f"{path}/{keyword}/{index}")
                return found
        if "allOf" in w:
            rest = {k: v for k, v in w.items() if k != "allOf"}
            candidates = [self.check((branch, w_root), (r, r_root), path) for branch in w["allOf"]]
            if rest:
                candidates.append(self.check((rest, w_root), (r, r_root), path))
            return min(candidates, key=len)  # the writer meets every branch: one that fits is enough
        for keyword in ("anyOf", "oneOf"):
            if keyword in r:
                if any(not self.check((w, w_root), (branch, r_root), path) for branch in r[keyword]):
                    return self.check((w, w_root), ({k: v for k, v in r.items() if k != keyword}, r_root), path)
                return [Problem("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path, f"no {keyword} branch of the reader fits")]
        found = []
        for index, branch in enumerate(r.get("allOf", ())):
            found += self.check((w, w_root), (branch, r_root), f"{path}/allOf/{index}")
        return found + self.check_plain(w, w_root, r, r_root, path)

    def check_plain(self, w: dict, w_root: Any, r: dict, r_root: Any, path: str) -> list[Problem]:
        found = []
        values = w["enum"] if "enum" in w else [w["const"]] if "const" in w else None
        for keyword in ("enum", "const"):
            if keyword in r:
                allowed = r["enum"] if keyword == "enum" else [r["const"]]
                if values is None or any(value not in allowed for value in values):
                    found.append(Problem("ENUM_ARRAY_NARROWED", f"{path}/{keyword}", f"the reader narrowed {keyword}"))
        writer_types = self.types(w) if values is None else {_json_type(v) for v in values}
        reader_types = self.types(r) | ({"integer"} if "number" in self.types(r) else set())
        lost = sorted(writer_types - reader_types)
        if lost:
            found.append(Problem("TYPE_NARROWED", f"{path}/type", f"the reader does not accept {', '.join(lost)}"))
        found += self.check_bounds(w, r, path)
        if "array" in writer_types & reader_types:
            found += self.check_items(w, w_root, r, r_root, path)
        if "object" in writer_types & reader_types:
            found += self.check_object(w, w_root, r, r_root, path)
        return found

    def check_bounds(self, w: dict, r: dict, path: str) -> list[Problem]:
        found = []
        for keyword, reader_is_looser in BOUNDS.items():
            if keyword in r and (keyword not in w or not reader_is_looser(r[keyword], w[keyword])):
                found.append(
                    Problem(f"{keyword.upper()}_NARROWED", f"{path}/{keyword}", f"the reader narrowed {keyword}")
                )
        return found

    def check_items(self, w: dict, w_root: Any, r: dict, r_root: Any, path: str) -> list[Problem]:
        w_items, r_items = w.get("items", True), r.get("items", True)
        if isinstance(w_items, list) or isinstance(r_items, list):
            w_list = w_items if isinstance(w_items, list) else []
            r_list = r_items if isinstance(r_items, list) else []
            found = []
            for index in range(max(len(w_list), len(r_list))):
                w_item = w_list[index] if index < len(w_list) else w.get("additionalItems", True)
                r_item = r_list[index] if index < len(r_list) else r.get("additionalItems", True)
                found += self.check((w_item, w_root), (r_item, r_root), f"{path}/items/{index}")
            return found
        return self.check((w_items, w_root), (r_items, r_root), f"{path}/items")

    def check_object(self, w: dict, w_root: Any, r: dict, r_root: Any, path: str) -> list[Problem]:
        w_props, r_props = w.get("properties", {}), r.get("properties", {})
        w_extra, r_extra = w.get("additionalProperties", True), r.get("additionalProperties", True)
        found = []
        for name, schema in w_props.items():
            where = f"{path}/properties/{name}"
            if name in r_props:
                found += self.check((schema, w_root), (r_props[name], r_root), where)
            elif r_extra is False:
                text = f"property {name} is removed from the reader, whose content model is closed"
                found.append(Problem("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", where, text))
            else:
                found += self.check((schema, w_root), (r_extra, r_root), where)
        for name, schema in r_props.items():
            if name not in w_props and w_extra is not False:
                if self.check((w_extra, w_root), (schema, r_root), f"{path}/properties/{name}"):
                    text = f"property {name} is added to the reader while the writer's content model is open"
                    found.append(Problem("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", f"{path}/properties/{name}", text))
        if w_extra is not False:
            found += self.check((w_extra, w_root), (r_extra, r_root), f"{path}/additionalProperties")
        for name in r.get("required", ()):
            if name not in w.get("required", ()) and "default" not in self.deref((r_props.get(name, {}), r_root))[0]:
                text = f"property {name} is required by the reader but not by the writer"
                found.append(Problem("REQUIRED_ATTRIBUTE_ADDED", f"{path}/required", text))
        return found


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "string")


#: Bounds the reader may only keep or loosen: does the reader's value accept all of the writer's?
BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "maximum": lambda r, w: r >= w,
    "exclusiveMaximum": lambda r, w: r >= w,
    "minimum": lambda r, w: r <= w,
    "exclusiveMinimum": lambda r, w: r <= w,
    "maxLength": lambda r, w: r >= w,
    "minLength": lambda r, w: r <= w,
    "maxItems": lambda r, w: r >= w,
    "minItems": lambda r, w: r <= w,
    "maxProperties": lambda r, w: r >= w,
    "minProperties": lambda r, w: r <= w,
    "multipleOf": lambda r, w: (w / r) == int(w / r),
    "pattern": lambda r, w: r == w,
    "uniqueItems": lambda r, w: not r or w,
}
