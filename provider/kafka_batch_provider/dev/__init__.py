"""Local servers and tools for development, tests and the demo: the embedded broker, the S3-protocol
server, a local Spark Connect server, the live Airflow stack of ``make airflow``.
"""
