"""Apache Kafka with a SASL_SSL listener and ACLs, for tests: ``secure_kafka`` (session).

Built on :class:`~kafka_batch_provider.dev.kafka.KafkaBroker`, with what a secured cluster has:

* **TLS** from a test CA made with ``openssl`` at the start, in a temporary folder: the broker's
  certificate (CN=broker, SAN IP:127.0.0.1 and DNS:localhost, so clients verify the host name as
  they do by default) and a PEM keystore (key + chain in one file) and truststore. A second,
  unrelated CA stands in for a client that trusts the wrong one.
* **SASL/SCRAM-SHA-512** on the ``SASL_SSL`` listener: ``admin`` is made when the storage is
  formatted (``--add-scram``), other users by :meth:`SecureKafka.add_user`.
* **ACLs** (``StandardAuthorizer``, nothing allowed without one): ``admin`` and the broker's own
  certificate (``User:CN=broker``) are super users. Broker-to-broker traffic (the transaction
  markers a broker sends itself) goes over SASL_SSL as ``admin``; the controller listener is
  TLS with client certificates. The PLAINTEXT listener stays open for the broker's own ready
  check, but its principal (``User:ANONYMOUS``) has no ACL: it can do nothing.

Measured on 2 cores: certificates 0.4 s, format + start ~2 s.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kafka_batch_provider.dev.kafka import KafkaBroker
from kafka_batch_provider.testing.pytest_plugin import shared_servers

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


def openssl(*arguments: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *arguments], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"openssl {' '.join(arguments[:2])} failed: {result.stderr[-500:]}"


def make_certificates(folder: Path) -> dict[str, Path]:
    """A test CA, the broker's certificate signed by it (PEM keystore: key + chain), another CA."""
    folder.mkdir(parents=True, exist_ok=True)
    days = "2"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", days, "-subj", "/CN=kafka-batch-test-ca", cwd=folder)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=broker", cwd=folder)  # fmt: skip
    (folder / "broker.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", days, "-extfile", "broker.ext", cwd=folder)  # fmt: skip
    # Kafka's PEM keystore: the PKCS#8 key, then the certificate chain, in one file.
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.p8.key", cwd=folder)
    keystore = folder / "broker-keystore.pem"
    keystore.write_text("".join((folder / name).read_text() for name in ("broker.p8.key", "broker.crt", "ca.pem")))
    keystore.chmod(0o600)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-ca.key", "-out", "other-ca.pem",
            "-days", days, "-subj", "/CN=another-ca", cwd=folder)  # fmt: skip
    return {"ca": folder / "ca.pem", "keystore": keystore, "other_ca": folder / "other-ca.pem"}


def jaas(user: str, password: str) -> str:
    return f'{SCRAM_LOGIN} required username="{user}" password="{password}";'


@dataclass
class SecureKafka:
    """A started SASL_SSL broker with ACLs; :meth:`client_config` gives librdkafka settings for a user.

    :param port: its SASL_SSL listener's.
    """

    port: int
    ca: Path
    other_ca: Path
    admin_password: str
    _admin: Any = field(default=None, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def describe(self) -> dict[str, Any]:
        """What another xdist worker needs to reach it (the arguments of this class)."""
        return {
            "port": self.port,
            "ca": str(self.ca),
            "other_ca": str(self.other_ca),
            "admin_password": self.admin_password,
        }

    def client_config(self, user: str, password: str, ca: Path | None = None) -> dict[str, str]:
        """librdkafka settings of ``user`` on the SASL_SSL listener (the host name is verified)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(ca or self.ca),
        }

    @property
    def admin_config(self) -> dict[str, str]:
        return self.client_config(ADMIN, self.admin_password)

    @property
    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:  # kept: a collected AdminClient fails its futures (_DESTROY)
            self._admin = AdminClient(self.admin_config)
        return self._admin

    def add_user(self, name: str, password: str) -> None:
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        upsert = UserScramCredentialUpsertion(name, info, password.encode())
        for future in self.admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)

    def allow(self, user: str, resource: str, name: str, operation: str = "READ") -> None:
        """An ALLOW ACL for ``User:<user>``: ``resource`` ``topic`` or ``group``, a literal name."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        binding = AclBinding(
            ResourceType[resource.upper()],
            name,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            AclOperation[operation.upper()],
            AclPermissionType.ALLOW,
        )
        for future in self.admin.create_acls([binding]).values():
            future.result(timeout=30)

    def new_user(self, grants: list[tuple[str, str, str]] = ()) -> tuple[str, str]:
        """A new SCRAM user with these ``(resource, name, operation)`` grants: ``(name, password)``."""
        name, password = f"user-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
        self.add_user(name, password)
        for resource, resource_name, operation in grants:
            self.allow(name, resource, resource_name, operation)
        return name, password


def start_secure_broker(folder: Path) -> tuple[KafkaBroker, SecureKafka]:
    """Certificates in ``folder``, then a SASL_SSL broker with ACLs, started detached."""
    certs = make_certificates(folder / "certs")
    admin_password = f"admin-{uuid.uuid4().hex}"
    tls = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["keystore"]),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs["ca"]),
    }
    properties = {
        **tls,
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "inter.broker.listener.name": "SASL_SSL",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas(ADMIN, admin_password),
        # The controller listener asks for the broker's certificate: its principal is User:CN=broker.
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN};User:CN=broker",
        "allow.everyone.if.no.acl.found": "false",
        "auto.create.topics.enable": "false",
    }
    broker = KafkaBroker(
        log_path=folder / "kafka.log",
        data_dir=folder / "data",
        properties=properties,
        extra_listeners={"SASL_SSL": "SASL_SSL"},
        listener_protocols={"CONTROLLER": "SSL"},
        format_options=("--add-scram", f"{MECHANISM}=[name={ADMIN},password={admin_password}]"),
        detach=True,
    ).start()
    return broker, SecureKafka(broker.listener_ports["SASL_SSL"], certs["ca"], certs["other_ca"], admin_password)


@pytest.fixture(scope="session")
def secure_kafka() -> SecureKafka:
    """An Apache Kafka with a SASL_SSL listener (SCRAM-SHA-512, a test CA) and ACLs, one for the
    pytest session (its xdist workers share it: each test makes users and topics of its own)."""
    info = shared_servers().get(
        "secure-kafka",
        start_secure_broker,
        lambda started: [started[0]],
        lambda started: started[1].describe(),
    )
    return SecureKafka(info["port"], Path(info["ca"]), Path(info["other_ca"]), info["admin_password"])
