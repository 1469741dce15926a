"""Where the schema registry is and how to log in: from a URL and a settings file, or from an
Airflow connection; credentials stay in the settings, never in the URL shown."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.registry.settings import settings_from, settings_from_connection


def connection(**fields):
    base = {"host": "", "schema": "", "port": None, "login": None, "password": None, "extra_dejson": {}}
    return SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize(
    "fields, expected_url",
    [
        ({"host": "registry", "port": 8081}, "http://registry:8081"),
        ({"host": "registry", "schema": "https"}, "https://registry"),
        ({"host": "https://registry.example.com/sr/", "port": 8081}, "https://registry.example.com:8081/sr"),
        ({"host": "http://registry:9000", "port": 8081}, "http://registry:9000"),  # the host's own port wins
    ],
)
def test_a_connection_becomes_the_registry_url(fields, expected_url):
    found = settings_from_connection(connection(**fields)).url
    assert found == expected_url, f"expected {expected_url}, found {found}"


def test_a_connection_login_is_basic_auth_and_its_extra_the_other_settings():
    settings = settings_from_connection(
        connection(host="registry", login="u", password="p-secret", extra_dejson={"ssl.ca.location": "/ca.pem"})
    )
    assert settings.client_config() == {
        "url": "http://registry",
        "basic.auth.user.info": "u:p-secret",
        "ssl.ca.location": "/ca.pem",
    }
    assert "p-secret" not in repr(settings)


def test_a_settings_file_holds_the_credentials_and_the_url_comes_from_the_flag(tmp_path):
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"basic.auth.user.info": "u:secret"}))
    settings = settings_from("http://registry:8081", str(path))
    assert settings.client_config() == {"url": "http://registry:8081", "basic.auth.user.info": "u:secret"}
    assert settings_from(None) is None
    with pytest.raises(ConfigError, match="is required with a schema registry settings file"):
        settings_from(None, str(path))
    path.write_text(json.dumps({"url": "http://elsewhere"}))
    with pytest.raises(ConfigError, match="belongs in schema_registry_url"):
        settings_from("http://registry:8081", str(path))
    with pytest.raises(ConfigError, match="cannot read schema registry settings file"):
        settings_from("http://registry:8081", str(tmp_path / "missing.json"))


#: URLs whose credentials stand outside the authority a URL parser finds (a slash too few or too
#: many, no scheme, a colon for the scheme's slashes): the refusal must not repeat them.
MALFORMED_WITH_CREDENTIALS = [
    "http:/alice:s3cr3t@registry:8081",
    "http:///alice:s3cr3t@registry:8081",
    "https:alice:s3cr3t@registry",
    "http//alice:s3cr3t@registry",
    "alice:s3cr3t@registry:8081",
    "http://registry:8081,http:/alice:s3cr3t@other:8081",
    "http://alice:s3cr3t@registry:notaport",
    "ftp://alice:s3cr3t@registry",
]


@pytest.mark.parametrize("url", MALFORMED_WITH_CREDENTIALS)
def test_a_malformed_url_with_credentials_is_refused_without_repeating_them(url):
    with pytest.raises(ConfigError) as refused:
        settings_from(url)
    message = str(refused.value)
    assert "s3cr3t" not in message and "alice" not in message, f"the refusal repeats the credentials: {message}"
    assert "carries credentials" in message, f"expected the credentials refusal, found: {message}"


@pytest.mark.parametrize("host", ["http:/alice:s3cr3t@registry", "alice:s3cr3t@registry", "http:///alice:s3cr3t@r"])
def test_a_connection_host_with_credentials_is_refused_without_repeating_them(host):
    with pytest.raises(ConfigError) as refused:
        settings_from_connection(connection(host=host, port=8081, login="bob", password="pw-9"))
    message = str(refused.value)
    for secret in ("s3cr3t", "alice", "pw-9"):
        assert secret not in message, f"the refusal repeats {secret!r}: {message}"


@pytest.mark.parametrize("url", ["http:/registry:8081", "registry:8081", "http://registry:port", "file:///tmp/x"])
def test_a_malformed_url_without_credentials_is_refused_naming_it(url):
    with pytest.raises(ConfigError, match="schema registry URL .* is not") as refused:
        settings_from(url)
    assert url in str(refused.value), f"the refusal should name the URL {url!r}: {refused.value}"
