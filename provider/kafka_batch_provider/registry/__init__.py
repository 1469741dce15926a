"""The schema registry: where it is and how to log in (:mod:`.settings`), and the schemas a
batch needs, fetched through confluent-kafka's own client (:mod:`.client`)."""
