"""``LOAD DATA LOCAL INFILE`` without handing the server the worker's files.

PyMySQL answers a server's request for a local file with whatever file the server names, at any
statement of a connection made with ``local_infile``: a rogue or hijacked server (a wrong host, a
network without TLS) could read a worker's files, ``/proc/self/environ`` and its secrets among
them. A connection of :func:`pinned_connection` takes the capability (the server refuses ``LOAD
DATA LOCAL`` without it) but sends a file only inside :func:`sending`, and only the file it names;
any other request closes the connection and fails the statement in one line, having sent nothing.
(PyMySQL's ``Connection.show_warnings`` reads its result unpinned; the sinks read warnings by a
cursor's ``SHOW WARNINGS``, which is pinned.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The client error code the refusal carries (CR_UNKNOWN_ERROR: not a server's code, never terminal).
REFUSED = 2000


@functools.cache
def pinned_connection() -> type:
    """PyMySQL's connection class whose statements send only the pinned file (made on first use:
    PyMySQL is the ``mysql`` extra's, and this module imports without it)."""
    from pymysql import err
    from pymysql.connections import Connection, MySQLResult
    from pymysql.protocol import LoadLocalPacketWrapper

    class PinnedResult(MySQLResult):
        """A statement's result that answers a request for a local file only with the pinned one."""

        def _read_load_local_packet(self, first_packet: Any) -> None:
            connection = self.connection
            asked = LoadLocalPacketWrapper(first_packet).filename
            pinned = getattr(connection, "pinned_file", None)
            if pinned is None or asked != os.fsencode(pinned):
                # (nothing sent, not even QUIT: the server waits for file data; the protocol cannot go on)
                connection._force_close()
                raise err.OperationalError(
                    REFUSED,
                    "the server asked for a local file this statement does not send: the connection is closed",
                )
            super()._read_load_local_packet(first_packet)

    class PinnedConnection(Connection):
        """A PyMySQL connection whose statements' results are ``PinnedResult``."""

        #: the one file the server may ask for now (set by :func:`sending`)
        pinned_file: str | None = None

        def _read_query_result(self, unbuffered: bool = False) -> int:
            # (PyMySQL's own, with the pinned result: it has no hook for the file a server may ask for)
            self._result = None
            result = PinnedResult(self)
            if unbuffered:
                result.init_unbuffered_query()
            else:
                result.read()
            self._result = result
            if result.server_status is not None:
                self.server_status = result.server_status
            return result.affected_rows

    return PinnedConnection


@contextmanager
def sending(connection: Any, path: str) -> Iterator[None]:
    """The block's ``LOAD DATA LOCAL INFILE`` may send ``path``, and no other file."""
    connection.pinned_file = path
    try:
        yield
    finally:
        connection.pinned_file = None
