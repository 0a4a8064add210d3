"""`QuotasClient`: client quotas through DescribeClientQuotas and AlterClientQuotas (KIP-546).

An entity is a list of (entity type, name) pairs: `("user", "alice")`, `("client-id", None)` (None:
the default), both for a user's client id. A filter component is (entity type, match), where
match is a name, `DEFAULT` or `ANY` (any specified name).
"""

from __future__ import annotations

from dataclasses import dataclass

from kbroker.client.cluster import ClusterClient
from kbroker.client.errors import check

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
DEFAULT = object()  # a filter matching the default entity of its type
ANY = object()  # a filter matching any specified name

Entity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class QuotaAlterResult:
    entity: Entity
    error_code: int
    error_message: str | None


class QuotasClient(ClusterClient):
    def describe_client_quotas(self, components: list[tuple[str, object]],
                               strict: bool = False) -> dict[Entity, dict[str, float]]:
        """Entity -> quota values, for the entities matching the filter; raises on an error."""
        wire = []
        for entity_type, match in components:
            if match is DEFAULT:
                wire.append({"entity_type": entity_type, "match_type": MATCH_DEFAULT, "match": None})
            elif match is ANY:
                wire.append({"entity_type": entity_type, "match_type": MATCH_SPECIFIED, "match": None})
            else:
                wire.append({"entity_type": entity_type, "match_type": MATCH_EXACT, "match": match})
        response = self.request(DESCRIBE_CLIENT_QUOTAS, {"components": wire, "strict": strict})
        check(response.error_code, response.error_message)
        return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry["values"]}
                for entry in response.entries or []}

    def alter_client_quotas(self, alterations: list[tuple[Entity, dict[str, float | None]]],
                            validate_only: bool = False) -> list[QuotaAlterResult]:
        """Set (a number) or remove (None) quotas of each entity; one result per entity."""
        entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in ops.items()]}
                   for entity, ops in alterations]
        response = self.request(ALTER_CLIENT_QUOTAS, {"entries": entries, "validate_only": validate_only})
        return [QuotaAlterResult(tuple((e.entity_type, e.entity_name) for e in entry.entity), entry.error_code,
                                 entry.error_message) for entry in response.entries]
