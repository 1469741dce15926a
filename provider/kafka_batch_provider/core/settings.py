"""A setting named in the caller's words. Pure, no I/O.

An error that advises changing a setting holds a :class:`Setting`; the message names it the way
whoever called us names it: ``on_data_loss='earliest'`` for the operators and the Python API
(the keyword arguments), ``--on-data-loss=earliest`` on the command line, which switches the
wording for its own run (:func:`worded`); a Spark application started by spark-submit is told
the wording of whoever started it (:data:`WORDING_ENV`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

#: The command line's flags whose names are not the keyword argument's with dashes.
FLAGS = {
    "topics": "--topic",
    "group_id": "--group",
    "output_format": "--format",
    "output_path": "--output",
    "kafka_timeout": "--timeout",
    "catalog_conn_id": "--catalog-property",  # the command line gives the properties themselves
}

KEYWORDS = "keywords"
FLAGS_WORDING = "flags"
#: Hands the wording to a Spark application this process starts (its errors are worded there).
WORDING_ENV = "KAFKA_BATCH_SETTING_WORDING"

_wording = KEYWORDS  # process-wide: the command line sets it once for its whole run


def wording() -> str:
    """``keywords`` (the default: operators, Python) or ``flags`` (the command line)."""
    return _wording


@contextmanager
def worded(new: str | None) -> Iterator[None]:
    """Name settings as ``flags`` or ``keywords`` while this block runs (``None``: unchanged)."""
    global _wording
    before = _wording
    if new in (KEYWORDS, FLAGS_WORDING):
        _wording = new
    try:
        yield
    finally:
        _wording = before


@dataclass(frozen=True)
class Setting:
    """A setting by its keyword-argument name, and the value the advice suggests (if any)."""

    name: str
    value: str | None = None

    @property
    def flag(self) -> str:
        return FLAGS.get(self.name, "--" + self.name.replace("_", "-"))

    def __str__(self) -> str:
        if _wording == FLAGS_WORDING:
            return self.flag if self.value is None else f"{self.flag}={self.value}"
        return self.name if self.value is None else f"{self.name}={self.value!r}"


@dataclass(frozen=True)
class Advice:
    """Advice whose substance differs between the two ways of calling us (a connection id for an
    operator, property flags on the command line), shown in the caller's words."""

    keywords: str
    flags: str

    def __str__(self) -> str:
        return self.flags if _wording == FLAGS_WORDING else self.keywords
