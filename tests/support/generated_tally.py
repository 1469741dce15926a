"""What the generated tests count: the differential decoding cases and the evolution chains.

The counts ride on each test's report (:mod:`tests.matrix`), so ``make test``'s summary says how
many generated cases ran, also under pytest-xdist: ``decoding differential: N cases equal to
confluent-kafka's deserializers (avro A, ...)`` and ``schema evolution: C chains, V versions,
B batches landed, R refused as expected (per format: ...)``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tests.matrix import Matrix


@dataclass
class Evolution:
    """One test's chains: versions the registry accepted, and per output format the batches that
    landed and those refused as the evolution table says."""

    chains: int = 0
    versions: int = 0
    landed: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    def count(self, fmt: str, landed: bool) -> None:
        counts = self.landed if landed else self.refused
        counts[fmt] = counts.get(fmt, 0) + 1


@dataclass
class EvolutionTally:
    ran: int = 0
    chains: int = 0
    versions: int = 0
    landed: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    failed_ids: list[str] = field(default_factory=list)

    def record(self, nodeid: str, passed: bool, case: Evolution | None) -> None:
        self.ran += 1
        if case is not None:
            self.chains += case.chains
            self.versions += case.versions
            self.landed.update(case.landed)
            self.refused.update(case.refused)
        if not passed:
            self.failed_ids.append(nodeid)

    def line(self) -> str:
        formats = sorted(set(self.landed) | set(self.refused))
        per_format = ", ".join(f"{f} {self.landed[f]}/{self.refused[f]}" for f in formats)
        return (
            f"schema evolution: {self.chains} chains, {self.versions} versions, "
            f"{sum(self.landed.values())} batches landed, {sum(self.refused.values())} refused as expected "
            f"(landed/refused per format: {per_format}); {len(self.failed_ids)} test(s) failed"
        )


EVOLUTION = Matrix("evolution_count", Evolution, EvolutionTally(), "tests/integration/test_schema_evolution.py")


@dataclass
class Differential:
    """One differential test's generated cases that decoded equal to the reference, by value format."""

    cases: dict[str, int] = field(default_factory=dict)

    def count(self, value_format: str) -> None:
        self.cases[value_format] = self.cases.get(value_format, 0) + 1


@dataclass
class DifferentialTally:
    ran: int = 0
    cases: Counter[str] = field(default_factory=Counter)
    failed_ids: list[str] = field(default_factory=list)

    def record(self, nodeid: str, passed: bool, case: Differential | None) -> None:
        self.ran += 1
        if case is not None:
            self.cases.update(case.cases)
        if not passed:
            self.failed_ids.append(nodeid)

    def line(self) -> str:
        per_format = ", ".join(f"{f} {n}" for f, n in sorted(self.cases.items()))
        return (
            f"decoding differential: {sum(self.cases.values())} generated cases equal to confluent-kafka's "
            f"deserializers ({per_format}); {len(self.failed_ids)} test(s) failed"
        )


DIFFERENTIAL = Matrix(
    "differential_count", Differential, DifferentialTally(), "tests/integration/test_decoding_differential.py"
)
