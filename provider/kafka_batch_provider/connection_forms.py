"""The connection forms the provider declares, as plain data.

The provider info (:func:`kafka_batch_provider.get_provider_info`) is read before Airflow is
imported (provider registries and validation tools load the entry point first, and Airflow's
own configuration calls it while it starts), so it must import nothing heavy: the forms live
here, and the hooks hand out the same dicts from ``get_ui_field_behaviour``.
"""

from __future__ import annotations

from typing import Any

#: The ``schema_registry`` connection's form (the provider info gives it in hyphenated keys).
REGISTRY_FORM: dict[str, Any] = {
    "hidden_fields": [],
    "relabeling": {
        "host": "Registry URL or host",
        "schema": "Scheme (http or https, when the host has none)",
        "login": "User (basic auth; Confluent Cloud: API key)",
        "password": "Password (basic auth; Confluent Cloud: API secret)",
    },
    "placeholders": {
        "host": "https://registry.example.com",
        "port": "8081",
        "extra": '{"ssl.ca.location": "/etc/ssl/registry-ca.pem"}',
    },
}
