"""The answer to a request that failed as a whole, as Kafka's `getErrorResponse` builds it.

Kafka turns an exception thrown while handling a request into that API's error response: the
error code goes into the top-level `error_code` where the response has one, and every topic,
partition, group or resource the request named comes back with the error (names kept, null
names as ""). One walk over the response schema does this for every API: response arrays
mirror the request array they answer (same name, a known pairing, or the only one), and the
fields that identify an entry (name, topic id, partition index, group id...) are copied from
the request entry. A handler module may define `error_answer(version, request, code, message)`
where Kafka's answer differs from that rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from construct import Construct

from protocol.primitives import KArray, KString, KStruct

# Response arrays that answer a request array of another name.
_ARRAY_PAIRS: dict[str, tuple[str, ...]] = {
    "responses": ("topic_data", "topics", "topic_names"),
    "partition_responses": ("partition_data", "partitions"),
    "results": ("resources", "groups_names", "topics", "markers", "transactional_ids"),
    "groups": ("group_ids", "groups"),
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "coordinators": ("coordinator_keys",),
    "transaction_states": ("transactional_ids",),
}
# Response fields that identify an entry, and the request fields that carry the same thing.
_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("topic", "topic_name"),
    "topic": ("name",),
    "topic_name": ("name", "topic"),
    "partition_index": ("partition", "index"),
    "partition": ("partition_index", "index"),
    "index": ("partition_index", "partition"),
    "group_id": ("group_id",),
    "key": ("key",),
}
# Only these are copied from a request entry: they say which entry an answer is about.
_IDENTIFYING = frozenset({*_KEY_ALIASES, "topic_id", "resource_type", "resource_name", "transactional_id"})


def error_answer(api: ModuleType, handler: ModuleType | None, version: int, request: Any, code: int,
                 message: str | None) -> dict[str, Any]:
    """The body of `api`'s answer at `version` telling that `request` failed with `code`."""
    if handler is not None and hasattr(handler, "error_answer"):
        return handler.error_answer(version, request, code, message)
    return mirror(api.RESPONSE[version], request, code, message)


def mirror(struct: KStruct, source: Any, code: int, message: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields = (*struct.fields, *struct.tagged.values())
    request_arrays = _arrays_of(source)
    answer_arrays = [f for f in fields if _struct_array(f.con) is not None]
    for field in fields:
        name = field.name
        if name == "error_code":
            out[name] = code
        elif name == "error_message":
            out[name] = message
        elif field in answer_arrays:
            entries = _matching_array(name, request_arrays, len(answer_arrays))
            if entries is not None:
                element = _struct_array(field.con)
                out[name] = [mirror(element, entry, code, message) for entry in entries]
        elif name in _IDENTIFYING and isinstance(source, Mapping):
            value = _key_value(name, source)
            if value is not _ABSENT and not isinstance(value, list | Mapping):
                out[name] = _fit(field.con, value)
    if isinstance(source, str):  # an entry named by a bare string (DescribeGroups' group ids)
        first = next((f for f in struct.fields if isinstance(f.con, KString)), None)
        if first is not None:
            out[first.name] = source
    return out


_ABSENT = object()


def _key_value(name: str, source: Mapping[str, Any]) -> Any:
    if name in source:
        return source[name]
    for alias in _KEY_ALIASES.get(name, ()):
        if alias in source:
            return source[alias]
    return _ABSENT


def _fit(con: Construct, value: Any) -> Any:
    """A request value placed in a response field: a null where the answer cannot carry one becomes ""."""
    if value is None and isinstance(con, KString) and not con.nullable:
        return ""
    return value


def _struct_array(con: Construct) -> KStruct | None:
    if isinstance(con, KArray) and isinstance(con.element, KStruct):
        return con.element
    return None


def _arrays_of(source: Any) -> dict[str, list[Any]]:
    if not isinstance(source, Mapping):
        return {}
    return {k: v for k, v in source.items() if isinstance(v, list) and not k.startswith("_")}


def _matching_array(name: str, request_arrays: dict[str, list[Any]], answer_array_count: int) -> list[Any] | None:
    if name in request_arrays:
        return request_arrays[name]
    for candidate in _ARRAY_PAIRS.get(name, ()):
        if candidate in request_arrays:
            return request_arrays[candidate]
    if answer_array_count == 1 and len(request_arrays) == 1:
        return next(iter(request_arrays.values()))
    return None
