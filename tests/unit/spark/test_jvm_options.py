"""The jvm reader's settings: librdkafka's translated for Spark's Java Kafka client, the redaction
patterns that keep its secrets out of sight, and where its connector's jars come from. Pure."""

from __future__ import annotations

import re

import pytest

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.spark.jvm_options import REDACTION_CONF, java_client_config, jvm_reader_options
from kafka_batch_provider.spark.kafka_connector import jars_for_reader, missing_line, with_jars

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_sasl_ssl_with_scram_and_a_pem_ca_become_the_java_clients_jaas_config_and_truststore():
    config = {
        "bootstrap.servers": "b:9094",
        "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 32768,  # librdkafka's own: left out
        "logger": object(),
    }
    assert java_client_config(config) == {
        "bootstrap.servers": "b:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="alice" password="p\\"w\\\\d";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "isolation.level": "read_committed",
        "fetch.max.wait.ms": "100",
    }


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
             "sasl.password": "p"},
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                                 'password="p";'},
        ),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/c.pem",
             "ssl.key.password": "k", "ssl.endpoint.identification.algorithm": "none"},
            {"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/c.pem",
             "ssl.key.password": "k", "ssl.endpoint.identification.algorithm": ""},
        ),
        (
            {"security.protocol": "SSL", "ssl.keystore.location": "/c.p12", "ssl.keystore.password": "s",
             "ssl.ca.pem": "-----BEGIN CERTIFICATE-----"},
            {"security.protocol": "SSL", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/c.p12",
             "ssl.keystore.password": "s", "ssl.truststore.type": "PEM",
             "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----"},
        ),
        ({"security.protocol": "SSL", "ssl.ca.location": "probe"}, {"security.protocol": "SSL"}),
        # PLAINTEXT: credentials librdkafka ignores are not turned into a JAAS config either.
        ({"sasl.username": "u", "sasl.password": "p"}, {}),
    ],
    ids=["sasl-plain", "pem-client-certificate", "pkcs12-keystore-inline-ca", "system-cas", "plaintext"],
)  # fmt: skip
def test_other_security_settings_map_to_the_java_clients(config, expected):
    assert java_client_config(config) == expected


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.username": "u"},
         "sasl.mechanism=OAUTHBEARER (it maps PLAIN and SCRAM credentials only)"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
          "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.client.id": "c"},
         "sasl.mechanism=OAUTHBEARER (it maps PLAIN and SCRAM credentials only)"),
        ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"},
         "sasl.mechanism=GSSAPI (it maps PLAIN and SCRAM credentials only)"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
         "needs both sasl.username and sasl.password"),
        ({"security.protocol": "SSL", "ssl.certificate.location": "/c.crt", "ssl.key.location": "/c.key"},
         "in two files (put the key and the certificate chain in one PEM file"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"},
         "enable.ssl.certificate.verification=false"),
        ({"security.protocol": "SSL", "ssl.ca.location": "/etc/ssl/certs/"}, "(a folder of CA files"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "a\nb"},
         "with a line break"),
    ],
    ids=["oauthbearer", "oauthbearer-oidc", "gssapi-default", "no-password", "key-apart", "no-verification",
         "ca-folder", "newline"],
)  # fmt: skip
def test_what_the_java_client_cannot_take_is_refused_in_one_line(config, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)) as raised:
        java_client_config(config)
    assert "\n" not in str(raised.value), f"expected one line, got {str(raised.value)!r}"


def test_the_reader_options_carry_the_translation_and_leave_spark_managed_keys_out():
    options = jvm_reader_options(
        [OffsetRange("a", 0, 5, 10)],
        {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "u", "sasl.password": "p", "group.id": "mine", "isolation.level": "read_committed"},
    )  # fmt: skip
    assert options["kafka.isolation.level"] == "read_committed", options
    assert options["kafka.sasl.jaas.config"] == f'{SCRAM} required username="u" password="p";', options
    assert not {"kafka.group.id", "kafka.sasl.username", "kafka.sasl.password"} & set(options), sorted(options)


# -- redaction: Spark's patterns are Java regular expressions; these are Python-compatible too -----


def redacted(pattern: str, text: str) -> str:
    return re.sub(pattern, "*********(redacted)", text)


def test_the_string_pattern_hides_a_secret_option_in_spark_connects_statement_text():
    secret = 'pw-"quoted"-and-\\back'
    jaas = java_client_config(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": secret,
        }
    )["sasl.jaas.config"]
    escaped = jaas.replace("\\", "\\\\").replace('"', '\\"')  # protobuf's text format, as the statement shows it
    statement = (
        f'options {{\n  key: "kafka.bootstrap.servers"\n  value: "h:1"\n}}\n'
        f'options {{\n  key: "kafka.sasl.jaas.config"\n  value: "{escaped}"\n}}\n'
        f'options {{\n  key: "kafka.ssl.truststore.password"\n  value: "ts-pw"\n}}\n'
    )
    shown = redacted(REDACTION_CONF["spark.sql.redaction.string.regex"], statement)
    assert "pw-" not in shown and "ts-pw" not in shown, f"expected the secrets redacted, got:\n{shown}"
    assert 'value: "h:1"' in shown and shown.count("*********(redacted)") == 2, f"expected the rest kept:\n{shown}"
    # The JAAS text on its own (a plan string, an error) is caught by its password="...".
    assert "pw-" not in redacted(REDACTION_CONF["spark.sql.redaction.string.regex"], jaas)


@pytest.mark.parametrize(
    "key",
    ["kafka.sasl.jaas.config", "kafka.ssl.key.password", "kafka.ssl.keystore.key", "kafka.ssl.truststore.password"],
)
def test_the_options_and_core_patterns_match_every_secret_key_the_translation_makes(key):
    for name in ("spark.sql.redaction.options.regex", "spark.redaction.regex"):
        assert re.search(REDACTION_CONF[name], key), f"expected {name} to match {key}"
    assert not re.search(REDACTION_CONF["spark.redaction.regex"], "kafka.bootstrap.servers")


# -- the connector's jars -------------------------------------------------------------------------


def test_the_jvm_reader_takes_the_connectors_jars_from_the_tools_folder(tmp_path, monkeypatch):
    jars = tmp_path / "spark-kafka" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar"):
        (jars / name).write_bytes(b"PK")
    monkeypatch.setenv("KAFKA_BATCH_TOOLS_DIR", str(tmp_path))
    monkeypatch.delenv("KAFKA_BATCH_SPARK_KAFKA_JARS", raising=False)

    found = jars_for_reader("jvm")
    assert found == [str(jars / "kafka-clients-3.9.2.jar"), str(jars / "spark-sql-kafka-0-10_2.13-4.2.0.jar")]
    assert jars_for_reader("python") == [], "the python reader needs no jars"
    assert with_jars({"spark.jars": "/mine.jar"}, found)["spark.jars"] == ",".join(["/mine.jar", *found])


def test_without_the_connector_the_jvm_reader_is_refused_unless_spark_has_it_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_BATCH_TOOLS_DIR", str(tmp_path))  # make jvm-tools never ran here
    monkeypatch.delenv("KAFKA_BATCH_SPARK_KAFKA_JARS", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf

    with pytest.raises(ConfigError, match=re.escape(missing_line())) as raised:
        jars_for_reader("jvm")
    assert "`make jvm-tools`" in str(raised.value) and str(tmp_path / "spark-kafka" / "jars") in str(raised.value)
    packages = {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"}
    assert jars_for_reader("jvm", packages) == [], "the user's own packages provide it: nothing added, no refusal"


def test_beyond_the_observed_ranges_the_source_is_counted_in_total_against_what_was_written():
    from kafka_batch_provider.core.offsets import OffsetRange
    from kafka_batch_provider.core.plan import OffsetPlan
    from kafka_batch_provider.errors import WriteCheckError
    from kafka_batch_provider.spark.jvm_observation import OBSERVED_RANGES, observed_receipts

    ranges = tuple(OffsetRange("t", p, 0, 10) for p in range(OBSERVED_RANGES + 1))
    plan = OffsetPlan("b-1", "incremental", "g", ("t",), "read_committed", ranges)
    # Two tasks wrote parts of partition 0; every other partition in one.
    written = [
        {"topic": "t", "partition": 0, "rows": 4, "min_offset": 0, "max_offset": 3},
        {"topic": "t", "partition": 0, "rows": 6, "min_offset": 4, "max_offset": 9},
    ]
    written += [
        {"topic": "t", "partition": p, "rows": 10, "min_offset": 0, "max_offset": 9} for p in range(1, len(ranges))
    ]
    reports = [{"written": written[:1]}, {"written": written[1:]}]
    total = 10 * len(ranges)

    receipts = observed_receipts(plan, {"rows": total}, reports)
    assert [(r["partition"], r["rows"], r["first_offset"], r["last_offset"]) for r in receipts[:2]] == [
        (0, 10, 0, 9),
        (1, 10, 0, 9),
    ], receipts[:2]
    with pytest.raises(WriteCheckError, match=f"read {total + 1} rows but {total} were written"):
        observed_receipts(plan, {"rows": total + 1}, reports)
