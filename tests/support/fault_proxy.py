"""A TCP proxy whose port can go dark, to stop a server for its clients without losing its data.

The embedded broker and S3 server keep their data in memory: stopping the process would
drop every topic and object, so a restarted one could not show that a retry succeeds. Put
this proxy in front and stop the proxy instead: clients see exactly what a stopped server
looks like (open connections cut, new ones refused) while the data stays. The broker must
advertise the proxy's port, or Kafka clients would learn the real address and go around it.

The proxy is a process of its own, not a thread of the test: a library that holds the GIL
while it waits for the network (delta-rs does) would otherwise wait for its own proxy.
"""

from __future__ import annotations

import socket
import sys
import threading
from dataclasses import dataclass
from typing import ClassVar

from kafka_batch_provider.dev.local_servers import HOST, LocalServer, port_open
from kafka_batch_provider.errors import KafkaBatchError


@dataclass
class FaultProxy(LocalServer):
    """Forwards ``HOST:port`` to ``HOST:target_port`` until :meth:`go_dark`, and again after :meth:`restore`.

    :param target_port: the real server's port.
    :param port: the port clients use; ``0`` picks a free one.
    """

    target_port: int = 0
    label: ClassVar[str] = "fault proxy"

    @property
    def dark(self) -> bool:
        return self.pid is None

    def command(self) -> list[str]:
        return [sys.executable, __file__, str(self.port), str(self.target_port)]  # any working directory

    def wait_until_ready(self, timeout: float) -> None:
        self.poll_until(lambda: port_open(self.port), timeout, KafkaBatchError, "did not listen")

    def go_dark(self) -> None:
        """Refuse new connections and cut every open one, as a stopped server would."""
        self.stop()

    def restore(self) -> FaultProxy:
        """Listen again on the same port: the server is back."""
        return self.start()


def serve(port: int, target_port: int) -> None:
    """Accept on ``port`` and pipe every connection to ``target_port`` until killed."""
    listener = socket.create_server((HOST, port))
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection((HOST, target_port), timeout=5)
        except OSError:
            client.close()  # the real server is down too: the client sees its connection end
            continue
        upstream.settimeout(None)
        pair = Pair(client, upstream)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=pair.pump, args=(source, sink), daemon=True).start()


@dataclass
class Pair:
    """One proxied connection: both sockets are closed when both directions have ended."""

    client: socket.socket
    upstream: socket.socket
    running: int = 2

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    def pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)  # pass the half-close on: HTTP clients may wait for it
        except OSError:
            for sock in (source, sink):  # one side broke: so does the other, as TCP would
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        with self.lock:
            self.running -= 1
            done = self.running == 0
        if done:
            self.client.close()
            self.upstream.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
