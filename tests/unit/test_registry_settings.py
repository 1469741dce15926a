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
