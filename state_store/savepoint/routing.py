"""Which columns of a store's key Spark partitions its rows by.

A stateful operator's input is shuffled by `HashPartitioning(<its key expressions>, N)`, and
the state of a key lives in the store of the partition that hash picks. Rescaling to M
partitions re-routes every row through Spark's own `repartition(M, <the same columns>)`,
so the key columns must be exactly those expressions, in order:

  session windows            the key minus the session start: the prefix Spark scans by
                             (`numColsPrefixKey` in the operator metadata)
  stream-stream join         keyToNumValues: the join keys; keyWithIndexToValue: the join
                             keys without the trailing value index
  every other operator       the whole key (grouping keys, with the window for a windowed
                             aggregation; the deduplication columns)

Murmur3 hashes a struct field by field, so routing by a struct's fields equals routing by
the struct: the grouping expressions may be structs (a window) or plain columns alike.
"""

from __future__ import annotations

from ..errors import StateStoreError

JOIN_OPERATOR = "symmetricHashJoin"
JOIN_VALUE_INDEX_STORE = "keyWithIndexToValue"  # left-/right- prefixed
SUPPORTED_OPERATORS = frozenset({
    "stateStoreSave", "dedupe", "dedupeWithinWatermark", "sessionWindowStateStoreSaveExec",
    JOIN_OPERATOR, "flatMapGroupsWithState", "applyInPandasWithState",
})


class RoutingError(StateStoreError):
    """The operator keeps state this project cannot re-route."""


def check_routable(operator_name: str, store_name: str) -> None:
    """Refuses an operator whose rows this module cannot route: transformWithState keeps
    several state variables (column families, some with several values per key) in one
    store, which Spark's state data source reads one variable at a time."""
    if operator_name not in SUPPORTED_OPERATORS:
        raise RoutingError(
            f"operator {operator_name!r} (store {store_name!r}) is not one canonical "
            f"savepoints support ({', '.join(sorted(SUPPORTED_OPERATORS))}); for "
            "transformWithState state take a native savepoint (--format native), which "
            "keeps it whole but not re-partitionable")


def route_columns(operator_name: str, store_name: str, key_fields: list[str],
                  prefix_key_columns: int) -> list[str]:
    """The key fields, in order, whose hash names the partition of a row of this store."""
    check_routable(operator_name, store_name)
    if operator_name == JOIN_OPERATOR and store_name.endswith(JOIN_VALUE_INDEX_STORE):
        return key_fields[:-1]
    if prefix_key_columns > 0:
        return key_fields[:prefix_key_columns]
    return list(key_fields)
