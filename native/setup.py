"""Builds the native reader against the librdkafka of the installed confluent-kafka wheel.

The wheel carries its librdkafka as ``confluent_kafka.libs/librdkafka-<hash>.so.1``; the extension
links that file by name and finds it at run time beside itself
(``$ORIGIN/../confluent_kafka.libs``), so it loads the very library confluent-kafka loads. The
declarations come from Debian's ``librdkafka-dev`` (librdkafka keeps its C API and ABI
compatible within ``.so.1``). A build without either stops with one line.
"""

import importlib.metadata
import sys
from pathlib import Path

from setuptools import Extension, setup


def wheel_librdkafka() -> tuple[Path, str]:
    """The librdkafka of the installed confluent-kafka wheel, and that wheel's version."""
    try:
        import confluent_kafka
    except ImportError:
        sys.exit("error: the native reader builds against confluent-kafka's librdkafka: install confluent-kafka first")
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        sys.exit(f"error: no librdkafka in {libs}: the native reader needs confluent-kafka's Linux wheel")
    return found[0], importlib.metadata.version("confluent-kafka")


HEADER = Path("/usr/include/librdkafka/rdkafka.h")
if not HEADER.exists():
    sys.exit(f"error: {HEADER} is missing: apt-get install librdkafka-dev (the native reader's C declarations)")
library, confluent_kafka_version = wheel_librdkafka()

setup(
    # The library's file name holds a hash of that wheel: only the same confluent-kafka has it.
    install_requires=[f"confluent-kafka=={confluent_kafka_version}"],
    ext_modules=[
        Extension(
            "kafka_batch_native._reader",
            sources=["kafka_batch_native/_reader.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Werror"],
            extra_link_args=[f"-L{library.parent}", f"-l:{library.name}", "-Wl,-rpath,$ORIGIN/../confluent_kafka.libs"],
        )
    ],
)
