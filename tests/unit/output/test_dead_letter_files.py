"""Publishing a logged batch's dead letters: idempotent, finishes a move cut short, never loses or doubles."""

from __future__ import annotations

import pytest

from kafka_batch_provider.errors import ManifestError
from kafka_batch_provider.output.dead_letter_files import (
    attempt_staging,
    check_dead_letters_published,
    publish_dead_letters,
    staged_dead_letters,
    unpublished,
)
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.tables import attempt_of

STAGING = "data/b-1/aaaa1111"
FINAL = "_kafka_batch/_dead_letters/batch_id=b-1"


def entry_with(files: dict[str, bytes], staging: str | None = STAGING) -> dict:
    return {
        "batch_id": "b-1",
        "seq": 3,
        "staging": staging,
        "location": staging,
        "dead_letters": {
            "rows": len(files),
            "files": [{"name": n, "bytes": len(b), "rows": 1} for n, b in files.items()],
            "staging": staged_dead_letters(STAGING),
            "location": FINAL,
        },
    }


@pytest.fixture
def data(tmp_path) -> Location:
    return Location(str(tmp_path / "table"))


def stage(data: Location, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        data.put_atomic(f"{staged_dead_letters(STAGING)}/{name}", content)


def test_publishing_moves_exactly_the_listed_files_and_is_idempotent(data):
    files = {"part-0.parquet": b"one", "part-1.parquet": b"three"}
    stage(data, {**files, "part-9-late.parquet": b"a late attempt's"})
    entry = entry_with(files)
    assert unpublished(data, entry) == sorted(files)
    publish_dead_letters(data, entry)
    assert data.file_sizes(FINAL) == {"part-0.parquet": 3, "part-1.parquet": 5}, "only the listed files"
    assert not data.exists(staged_dead_letters(STAGING)), "the staged copies (and the late file) are gone"
    publish_dead_letters(data, entry)  # again: nothing to do, nothing raised
    check_dead_letters_published(data, entry)


def test_a_publish_cut_short_is_finished_and_strays_of_another_attempt_are_removed(data):
    files = {"part-0.parquet": b"one", "part-1.parquet": b"three"}
    stage(data, files)
    data.move_into(staged_dead_letters(STAGING), FINAL, ["part-0.parquet"])  # the first publisher died here
    data.put_atomic(f"{FINAL}/part-0-other-attempt.parquet", b"x")
    publish_dead_letters(data, entry_with(files))
    assert sorted(data.file_sizes(FINAL)) == sorted(files), f"found {data.file_sizes(FINAL)}"


def test_a_listed_file_neither_published_nor_staged_is_lost_and_says_so(data):
    files = {"part-0.parquet": b"one", "part-1.parquet": b"three"}
    stage(data, {"part-0.parquet": b"one"})
    with pytest.raises(ManifestError, match="lists 1 dead-letter file.*neither published nor staged"):
        publish_dead_letters(data, entry_with(files))
    with pytest.raises(ManifestError, match="2 of its 2 dead-letter file"):
        check_dead_letters_published(data, entry_with(files))


def test_a_batch_of_only_dead_letters_is_the_attempt_that_staged_them():
    only_letters = entry_with({"part-0.parquet": b"one"}, staging=None)
    assert attempt_staging(only_letters) == STAGING
    assert attempt_of(only_letters) == "aaaa1111", "two attempts must not share a saved manifest's name"
    assert attempt_staging({"staging": None, "dead_letters": None}) is None
    assert attempt_of({"location": None}) == "none"
