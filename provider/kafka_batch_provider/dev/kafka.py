"""Apache Kafka itself for the demo and the tests: one KRaft process on 127.0.0.1.

The broker our users run, not a look-alike: the tests prove the product against it (tansu,
:mod:`kafka_batch_provider.dev.broker`, stays a light alternative). ``kafka.Kafka`` runs as a
plain ``java`` process from the jars that ``make jvm-tools`` fetched into
``$KAFKA_BATCH_TOOLS_DIR/kafka/jars`` (``jvm/kafka/pom.xml`` pins them; nothing is resolved at
run time), with ``kafka-batch kafka start|status|stop`` and the ``kafka_bootstrap_servers``
pytest fixture on top.

What one node needs and why it is set so (:data:`BASE_PROPERTIES`):

* **Broker and controller in one process** (``process.roles=broker,controller``) with a static
  quorum of itself (``controller.quorum.voters``). The static voter list is read from the
  configuration at every start, so a restart may put the controller on another free port; a
  dynamic quorum (``--standalone``) would record the port in the metadata log at format time.
* **Storage formatted on first start** in the node's own data folder
  (``kafka.tools.StorageTool format``, ~1 s) with a cluster id made here; a folder already
  formatted is started as it is, so a detached broker keeps its topics across restarts.
* **Replication factor 1 everywhere** (offsets, transaction state, share state; one partition
  each: fifty ``__consumer_offsets`` partitions cost seconds at the first group commit), and
  ``transaction.state.log.min.isr=1``, else transactions wait for replicas that never come.
* **No time-based retention unless a topic asks** (``log.retention.ms=-1``; a topic's own
  ``retention.ms`` still applies): tests and the demo produce records stamped months or years
  ago (backfills by time, date partitions), which Kafka's 7-day default would delete within
  a second here.
* **Test-speed timings**: ``group.initial.rebalance.delay.ms=0`` (a group's first join is
  not held 3 s), ``log.retention.check.interval.ms`` and ``log.initial.task.delay.ms`` of a
  second or less (retention tests need not wait 5 minutes), ``log.cleaner.backoff.ms=500``
  (compaction starts within a second instead of 15), and ``metadata.max.idle.interval.ms``
  of 5 s instead of 0.5 s (the controller's no-op record that keeps an idle metadata log
  moving: at 0.5 s an idle node spent ~1.2 s of CPU a minute, at 5 s ~0.8 s; a test session
  keeps several brokers idle for most of its run).
* **A small JVM**: ``-Xmx256m``, serial GC and C1 only (a broker of tests moves little data;
  the optimising compiler's threads cost more than they return on 2 cores), and
  ``log.cleaner.dedupe.buffer.size`` 8 MiB (its 128 MiB default is on heap: it alone would
  not fit). Measured on 2 cores (one busy): metadata answered ~1 s after ``exec``, 1.6 s
  with the first start's format, ~140 MB resident then; 165-220 MB through a test session.
* **A class-data archive** (``-XX:SharedArchiveFile``, the JVM maps Kafka's classes parsed
  and verified instead of reading them from 47 jars: roughly half the start). The first
  start without one records it at exit (``-XX:ArchiveClassesAtExit``) under a temporary
  name; whoever stops that broker (this object, or ``kafka-batch kafka stop``) moves it into
  place. It sits beside the jars, named by the Java and the jars it belongs to.
* ``auto.create.topics.enable`` stays Kafka's default (``true``), as most clusters have it;
  pass ``properties={"auto.create.topics.enable": "false"}`` to test the other way.
* ``-Dlog4j2.shutdownHookEnabled=false``: log4j's own shutdown hook races Kafka's and loses
  the last lines of a stop. SIGTERM stops the node in well under a second.

Any other Kafka can replace it: tests and the demo honour ``KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kafka_batch_provider.dev.local_servers import HOST, Detached, LocalServer, free_port, state_dir
from kafka_batch_provider.errors import ConfigError, KafkaUnavailableError

DEFAULT_PORT = 9092
#: The project's tools folder (``make jvm-tools`` fills ``<it>/kafka/jars``); default ``./.tools``.
TOOLS_ENV = "KAFKA_BATCH_TOOLS_DIR"
JVM_TOOLS_TARGET = "make jvm-tools"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
MIN_JAVA = 17
NODE_ID = 1

#: The JVM of a test broker (see the module docstring). The archive flag is added per start.
JAVA_OPTIONS = (
    "-Xms16m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Dlog4j2.shutdownHookEnabled=false",
)

#: Settings every node gets; the listeners, quorum and folders are added per start, and the
#: ``properties`` of :class:`KafkaBroker` override any of them.
BASE_PROPERTIES = {
    "process.roles": "broker,controller",
    "node.id": str(NODE_ID),
    "controller.listener.names": "CONTROLLER",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.ms": "-1",
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "500",
    "log.cleaner.backoff.ms": "500",
    "metadata.max.idle.interval.ms": "5000",
    "log.cleaner.dedupe.buffer.size": str(8 * 2**20),
    "log.cleaner.io.buffer.size": str(64 * 2**10),
}

#: Everything to standard output (the server's log file): Kafka's own defaults, minus the
#: request log at INFO (a line per request).
LOG4J2_PROPERTIES = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


# -- Java and the jars ----------------------------------------------------------------------


def tools_dir() -> Path:
    """``$KAFKA_BATCH_TOOLS_DIR`` (the Makefile exports the project's ``.tools``), else ``./.tools``."""
    return Path(os.environ.get(TOOLS_ENV) or Path.cwd() / ".tools").absolute()


def kafka_jars(jar_dir: Path | None = None) -> list[Path]:
    """Apache Kafka's jars, sorted (a class-data archive needs the same class path every time)."""
    folder = jar_dir or tools_dir() / "kafka" / "jars"
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not any(jar.name.startswith("kafka_2.13-") for jar in jars):
        raise ConfigError(
            f"Apache Kafka's jars are not in {folder}: fetch them with `{JVM_TOOLS_TARGET}` "
            f"(or set {TOOLS_ENV} to the folder that holds kafka/jars)"
        )
    return jars


def kafka_version(jars: Sequence[Path]) -> str:
    """The Kafka version of a jar set, from its ``kafka_2.13-<version>.jar``."""
    for jar in jars:
        if jar.name.startswith("kafka_2.13-") and jar.suffix == ".jar":
            return jar.stem.removeprefix("kafka_2.13-")
    return "unknown"


def java_executable() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else the first on ``PATH``; 17 or later."""
    if os.environ.get("JAVA_HOME"):
        java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
        if not Path(java).is_file():
            raise ConfigError(f"JAVA_HOME is {os.environ['JAVA_HOME']} but {java} does not exist")
    else:
        java = shutil.which("java") or ""
        if not java:
            raise ConfigError(f"Java not found: Apache Kafka needs Java {MIN_JAVA}+ on PATH or in JAVA_HOME")
    major, line = java_version(java)
    if major < MIN_JAVA:
        raise ConfigError(f"Apache Kafka needs Java {MIN_JAVA}+, {java} is: {line} (set JAVA_HOME to a newer JDK)")
    return java


@functools.lru_cache(maxsize=8)
def java_version(java: str) -> tuple[int, str]:
    """``(major, the first line of java -version)``; ``1.8.0_x`` is 8."""
    try:
        output = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"could not run {java} -version: {exc}") from None
    line = output.splitlines()[0] if output else ""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', line)
    if not match:
        raise ConfigError(f"cannot tell the version of {java}: {line or 'no output'}")
    major = int(match[1])
    return (int(match[2] or 0) if major == 1 else major), line


def archive_path(java: str, jars: Sequence[Path]) -> Path:
    """Where the class-data archive of this Java and these jars is (or would be): beside the
    jars, named by the Java's major version and a hash of the JVM build, the jars and the flags
    (an archive of another JVM or jar set is refused by the JVM: a slow start, not an error)."""
    real_java = Path(java).resolve()
    major, line = java_version(java)
    digest = hashlib.sha256(f"{real_java}|{line}|{' '.join(JAVA_OPTIONS)}\n".encode())
    for jar in jars:
        stat = jar.stat()
        digest.update(f"{jar.name}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return jars[0].parent.parent / f"kafka-classes-java{major}-{digest.hexdigest()[:12]}.jsa"


def adopt_recorded_archives(folder: Path) -> None:
    """Move archives that finished recording into place.

    A broker started without an archive records one at exit into ``.<name>.<token>.part``; it
    is whole once no process names it on its command line any more (the JVM writing it has
    exited). Several brokers may record at once (one per pytest worker): the first kept wins.
    """
    for part in folder.glob(".kafka-classes-*.part"):
        if _named_by_a_process(part.name):
            continue
        final = folder / (part.name[1:].split(".", 1)[0] + ".jsa")  # .<name>.<token>.part -> <name>.jsa
        try:
            if part.stat().st_size == 0 or final.exists():
                part.unlink()
            else:
                os.replace(part, final)
        except OSError:
            pass  # another process adopted or removed it first


def _named_by_a_process(text: str) -> bool:
    needle = text.encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


def new_cluster_id() -> str:
    """A cluster id as Kafka's ``Uuid.randomUuid()`` makes them: 16 random bytes, URL-safe
    base64 without padding, never starting with ``-`` (the tools would read it as a flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def properties_text(properties: Mapping[str, str]) -> str:
    """A ``server.properties`` file (values with ``\\`` escaped as Java's Properties reads them)."""
    lines = ["# Written by kafka_batch_provider.dev.kafka at every start: edits are overwritten."]
    lines += [f"{key}={str(value).replace(chr(92), chr(92) * 2)}" for key, value in properties.items()]
    return "\n".join(lines) + "\n"


# -- the broker -------------------------------------------------------------------------------


@dataclass
class KafkaBroker(LocalServer):
    """A single-node KRaft Apache Kafka (broker and controller in one process) on 127.0.0.1.

    Use as a context manager, or ``start()`` / ``stop()``. With ``detach=True`` the process
    outlives this Python process (``kafka-batch kafka start``).

    :param port: the client (PLAINTEXT) port; ``0`` picks a free one. The controller listens
        on another free port, chosen at each start.
    :param data_dir: the node's folder (configuration, ``log.dirs``), formatted on first start
        and kept; default: a temporary folder removed by :meth:`stop`.
    :param log_path: file for the broker's log (default: discarded).
    :param advertised_port: the port clients are told to use, when not ``port`` (a proxy's).
        The broker's own requests to itself (transaction markers) then go to an internal
        listener of their own, never through the proxy.
    :param properties: more ``server.properties`` settings, overriding the defaults.
    :param extra_listeners: more listeners, ``{name: security protocol}`` (e.g.
        ``{"SASL_SSL": "SASL_SSL"}``), each on a free port (:attr:`listener_ports`); their
        SASL and TLS settings go in ``properties``.
    :param advertised_ports: the port clients of an extra listener are told to use, when not
        its own (a proxy's), ``{name: port}``.
    :param format_options: more ``StorageTool format`` arguments (e.g. ``--add-scram ...``).
    :param listener_protocols: another security protocol for a built-in listener, e.g.
        ``{"CONTROLLER": "SSL"}`` (its TLS settings go in ``properties``); both are PLAINTEXT otherwise.
    :param max_heap: the JVM's ``-Xmx`` (``256m``, a test broker's).
    :param jar_dir: the jars (default ``$KAFKA_BATCH_TOOLS_DIR/kafka/jars``).
    """

    data_dir: Path | None = None
    advertised_port: int | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    extra_listeners: Mapping[str, str] = field(default_factory=dict)
    advertised_ports: Mapping[str, int] = field(default_factory=dict)
    format_options: Sequence[str] = ()
    listener_protocols: Mapping[str, str] = field(default_factory=dict)
    #: The JVM's ``-Xmx``: 256m is a test broker's; a benchmark's (10,000 partitions, GBs) needs more.
    max_heap: str = "256m"
    jar_dir: Path | None = None
    #: The port of each listener (``PLAINTEXT``, ``CONTROLLER``, the extra ones) once started.
    listener_ports: dict[str, int] = field(default_factory=dict)

    label: ClassVar[str] = "Apache Kafka broker"

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def controller_port(self) -> int | None:
        return self.listener_ports.get("CONTROLLER")

    def start(self, timeout: float = 60.0):
        """Format the storage if it is new, start the node, return once it answers metadata."""
        deadline = time.monotonic() + timeout
        self._java = java_executable()
        self._jars = kafka_jars(self.jar_dir)
        self._owned_dir = self.data_dir is None
        folder = Path(tempfile.mkdtemp(prefix="kafka-batch-kafka-")) if self.data_dir is None else self.data_dir
        self.data_dir = folder.absolute()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._archive_flag = self._class_archive_flag()
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        self.server_properties.write_text(properties_text(self.server_settings()))
        try:
            if not (self.log_dir / "meta.properties").is_file():
                self._format(max(deadline - time.monotonic(), 1.0))
            return super().start(max(deadline - time.monotonic(), 1.0))
        except BaseException:
            self._clean_up()
            raise

    @property
    def jars(self) -> list[Path]:
        """The class path (once started)."""
        return list(getattr(self, "_jars", []))

    @property
    def server_properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"

    def server_settings(self) -> dict[str, str]:
        """This start's ``server.properties``: the defaults, the listeners, then ``properties``."""
        ports = {"PLAINTEXT": self.port, "CONTROLLER": free_port()}
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
        advertised = {"PLAINTEXT": self.advertised_port or self.port}
        inter_broker = "PLAINTEXT"
        if self.advertised_port and self.advertised_port != self.port:
            ports["INTERNAL"] = free_port()
            protocols["INTERNAL"] = "PLAINTEXT"
            advertised["INTERNAL"] = ports["INTERNAL"]
            inter_broker = "INTERNAL"
        for name, protocol in self.extra_listeners.items():
            ports[name] = free_port()
            protocols[name] = protocol
            advertised[name] = self.advertised_ports.get(name, ports[name])
        protocols.update({name: p for name, p in self.listener_protocols.items() if name in protocols})
        self.listener_ports = ports
        return {
            **BASE_PROPERTIES,
            "controller.quorum.voters": f"{NODE_ID}@{HOST}:{ports['CONTROLLER']}",
            "listeners": ",".join(f"{name}://{HOST}:{port}" for name, port in ports.items()),
            "advertised.listeners": ",".join(f"{name}://{HOST}:{port}" for name, port in advertised.items()),
            "listener.security.protocol.map": ",".join(f"{name}:{p}" for name, p in protocols.items()),
            "inter.broker.listener.name": inter_broker,
            "log.dirs": str(self.log_dir),
            **{key: str(value) for key, value in self.properties.items()},
        }

    def _java_command(self, main_class: str, *arguments: str, heap: Sequence[str], archive: Sequence[str]) -> list[str]:
        return [
            self._java,
            *heap,
            *JAVA_OPTIONS[2:],
            *archive,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(str(jar) for jar in self._jars),
            main_class,
            *arguments,
        ]

    def command(self) -> list[str]:
        return self._java_command(
            MAIN_CLASS,
            str(self.server_properties),
            heap=(JAVA_OPTIONS[0], f"-Xmx{self.max_heap}"),
            archive=self._archive_flag,
        )

    def _format(self, timeout: float) -> None:
        """``StorageTool format`` with a new cluster id: once, before the node's first start."""
        arguments = ["format", "-t", new_cluster_id(), "-c", str(self.server_properties), *self.format_options]
        # The tool maps the broker's archive when there is one, but never records it: the
        # broker's own exit does (its classes are the ones worth having).
        archive = [flag for flag in self._archive_flag if flag.startswith("-XX:SharedArchiveFile=")]
        command = self._java_command(STORAGE_TOOL, *arguments, heap=("-Xmx128m",), archive=archive)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KafkaUnavailableError(
                f"formatting Apache Kafka's storage in {self.log_dir} took more than {timeout:g}s"
            ) from None
        if result.returncode != 0:
            lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
            raise ConfigError(
                f"formatting Apache Kafka's storage in {self.log_dir} failed (exit {result.returncode}): "
                + " | ".join(lines[-3:])
            )

    def _class_archive_flag(self) -> list[str]:
        """Map the archive of this Java and jar set, or record it at exit if there is none yet."""
        target = archive_path(self._java, self._jars)
        adopt_recorded_archives(target.parent)
        if target.is_file():
            return [f"-XX:SharedArchiveFile={target}"]
        if not os.access(target.parent, os.W_OK):
            return []  # someone else's tools folder: start without, as slowly as before
        if self.detach:
            # A detached broker is stopped by another process (a test session's owner, the command
            # line's `stop`), which would neither wait for the archive nor adopt it.
            return []
        self._recording = target.parent / f".{target.stem}.{uuid.uuid4().hex[:8]}.part"
        return [f"-XX:ArchiveClassesAtExit={self._recording}"]

    def wait_until_ready(self, timeout: float) -> None:
        """Ready means a metadata request is answered with this broker in it, not an open port.

        Asked on the internal listener when clients are told another port (a proxy's): a client
        follows the addresses in the metadata, and the proxy may not listen yet.
        """
        from confluent_kafka.admin import AdminClient

        from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER

        internal = self.listener_ports.get("INTERNAL")
        admin = AdminClient(
            {
                "bootstrap.servers": f"{HOST}:{internal}" if internal else self.bootstrap_servers,
                # retry the connection every 20-100 ms, not librdkafka's up to 10 s
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 100,
                "logger": LIBRDKAFKA_LOGGER,
            }
        )

        def answers() -> bool:
            try:
                return bool(admin.list_topics(timeout=0.5).brokers)
            except Exception:  # noqa: BLE001 - any failure here just means "not ready yet"
                return False

        self.poll_until(answers, timeout, KafkaUnavailableError, "did not answer a metadata request")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the node shuts down in well under a second), then SIGKILL after ``timeout``
        (30 s at least while it records the class archive, which it writes on its way out)."""
        if getattr(self, "_recording", None) is not None:
            timeout = max(timeout, 30.0)
        super().stop(timeout)
        self._clean_up()

    def _clean_up(self) -> None:
        if getattr(self, "_recording", None) is not None:
            adopt_recorded_archives(self._recording.parent)
            self._recording = None
        if getattr(self, "_owned_dir", False) and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self._owned_dir = False


def record_class_archive() -> str:
    """Record the class-data archive of this Java and these jars now, if there is none: a broker
    started and stopped in a folder of its own (``make test`` and ``make demo`` do it once, so no
    broker of theirs spends its start without it and its stop writing it)."""
    import tempfile

    broker = KafkaBroker()
    target = archive_path(java_executable(), kafka_jars(broker.jar_dir))
    if target.is_file():
        return f"Kafka's class archive is at {target}"
    with tempfile.TemporaryDirectory(prefix="kafka-archive-") as folder:
        with KafkaBroker(log_path=Path(folder) / "kafka.log", data_dir=Path(folder) / "data"):
            pass
    return f"recorded Kafka's class archive at {target}" if target.is_file() else f"no class archive at {target}"


# -- the detached broker of the command line ------------------------------------------------

DETACHED = Detached("kafka", KafkaBroker.label, marker=MAIN_CLASS, address="bootstrap_servers")


def detached_data_dir() -> Path:
    """The command line's broker keeps its topics here between ``stop`` and ``start``."""
    return state_dir() / "kafka-data"


def start_detached(port: int = DEFAULT_PORT, timeout: float = 60.0) -> dict:
    """Start a broker that keeps running after this process exits; remember it in a state file."""
    return DETACHED.start(
        lambda log: KafkaBroker(port=port, log_path=log, detach=True, data_dir=detached_data_dir()).start(timeout),
        lambda broker: {
            "bootstrap_servers": broker.bootstrap_servers,
            "controller_port": broker.controller_port,
            "version": kafka_version(broker.jars),
            "data_dir": str(broker.data_dir),
        },
    )


def status() -> dict:
    return DETACHED.status()


def stop_detached(timeout: float = 30.0) -> dict:
    """Stop it; an archive it recorded on its way out is moved into place."""
    info = DETACHED.stop(timeout)
    try:
        adopt_recorded_archives(tools_dir() / "kafka")
    except OSError:
        pass
    return info
