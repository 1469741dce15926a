"""``python -m kafka_batch_provider.cli``: the same as ``kafka-batch``."""

import sys

from kafka_batch_provider.cli import main

sys.exit(main())
