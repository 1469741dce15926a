# Two commands do all set-up: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

# This machine's hostname resolves to loopback and Spark would bind another interface.
export SPARK_LOCAL_IP ?= 127.0.0.1
# The project's own Airflow home: never touch ~/airflow.
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__LOAD_EXAMPLES ?= False
export KAFKA_BATCH_STATE_DIR ?= $(CURDIR)/.kafka-batch
# The project's tools folder: where the code finds Apache Kafka's jars (dev/kafka.py) and Spark's
# Kafka connector (.tools/spark-kafka/jars), fetched by `make jvm-tools`.
export KAFKA_BATCH_TOOLS_DIR ?= $(CURDIR)/.tools

LINTED := provider dags spark_apps tests scripts bench native

.PHONY: native native-prereqs bench-tools venv setup setup-core jvm-tools-one-by-one test check lint bytecode kafka-archive spark-archive after-setup demo bench airflow docs dist prereqs debian-prereqs postgres-prereqs azurite jvm-tools constraints clean

prereqs:
	@scripts/check-prereqs.sh "$(PYTHON)"

# Debian's packages the tests run as plain processes (scripts/debian-packages.sh: installed with one
# apt-get when run as root): the browser tests' Chromium, PostgreSQL (the change-data-capture source),
# MariaDB (the MariaDB/MySQL output's server, issue 50), librdkafka's C declarations (the native
# reader's build) and kcat (its baseline in make bench).
DEBIAN_PACKAGES := chromium postgresql mariadb-server librdkafka-dev kcat

debian-prereqs:
	@scripts/debian-packages.sh $(DEBIAN_PACKAGES)

postgres-prereqs:
	@scripts/debian-packages.sh postgresql

native-prereqs:
	@scripts/debian-packages.sh librdkafka-dev

# The native reader (native/: a C extension and a wheel of its own, airflow-provider-kafka-batch-native)
# compiled into the venv against the librdkafka of the confluent-kafka installed there (~2 s). Without
# it the product reads with the python reader; the suite needs it (the differential tests).
NATIVE_STAMP := $(VENV)/.native-installed

$(NATIVE_STAMP): native/pyproject.toml native/setup.py $(wildcard native/kafka_batch_native/*) $(STAMP) | native-prereqs
	@echo "== compiling the native reader (native/) into $(VENV)"
	$(BIN)/uv pip install --python $(BIN)/python --quiet --reinstall-package airflow-provider-kafka-batch-native \
	  --no-build-isolation -c constraints.txt ./native
	@touch $@

native: $(NATIVE_STAMP)

# _version.py holds the version the editable install's metadata carries.
$(STAMP): setup.cfg pyproject.toml constraints.txt provider/kafka_batch_provider/_version.py scripts/check-prereqs.sh | prereqs
	@echo "== creating $(VENV) and installing pinned dependencies (constraints.txt)"
	$(PYTHON) -m venv $(VENV)
	@# uv installs the same pinned set as pip, faster (45 s against 59 s measured), with the
	@# bytecode compiled as pip does (this machine sets PYTHONDONTWRITEBYTECODE: nothing is
	@# compiled later, and every process would compile every import again).
	$(BIN)/python -m pip install --quiet -c constraints.txt pip setuptools wheel uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -c constraints.txt -e ".[airflow,openlineage,docs,test,embedded-broker,embedded-cdc,embedded-s3,s3,gcs,azure,delta,iceberg,registry,postgres,mysql]"
	@# The Spark provider needs pyspark-client, which installs into the same pyspark/ package
	@# as pyspark (and is older): reinstall pyspark so its files, matching its jars, win. Uninstall
	@# then install, not --reinstall: that implies --refresh, which built pyspark's sdist again on every
	@# fresh clone (18 s, and 2 GB more in uv's cache each time); this takes the cached wheel (1 s).
	$(BIN)/uv pip uninstall --python $(BIN)/python --quiet pyspark
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode --no-deps -c constraints.txt pyspark
	$(BIN)/python scripts/check_install.py
	@touch $(STAMP)

venv: $(STAMP)

# Azurite, the Azure Blob emulator the abfs:// tests run as a plain process (tests/support/store_emulators.py):
# from npm, into the project's .tools/ (nothing global), exactly as scripts/azurite/package-lock.json pins it
# and its dependencies (npm ci). A changed lock reinstalls.
AZURITE_STAMP := .tools/azurite/.installed

$(AZURITE_STAMP): scripts/azurite/package.json scripts/azurite/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found: the Azure tests need Azurite from npm; install Node.js and npm (e.g. apt-get install nodejs npm)" >&2; exit 1; }
	@echo "== installing Azurite (npm ci, scripts/azurite/package-lock.json) into .tools/azurite"
	@mkdir -p .tools/azurite
	cp scripts/azurite/package.json scripts/azurite/package-lock.json .tools/azurite/
	npm ci --prefix .tools/azurite --no-audit --no-fund --loglevel=error
	@touch $(AZURITE_STAMP)

azurite: $(AZURITE_STAMP)

# The JVM parts, pinned by a checked-in POM each (jvm/<name>/pom.xml): Apache Kafka's broker
# (jvm/kafka, for dev/kafka.py: the tests' broker, `kafka-batch kafka start`) and Spark's Kafka source connector
# (jvm/spark-kafka). `mvn dependency:copy-dependencies` copies each POM's jars, with their
# dependencies, into .tools/<name>/jars, once; a changed POM fetches again into a clean folder
# (which also drops the broker's class-data archives: they belong to the old jars). Maven's
# cache is the user's ~/.m2; nothing is installed anywhere else. Nothing resolves at run time.
JVM_TOOLS := kafka spark-kafka kafka-connect debezium-postgres
JVM_STAMPS := $(JVM_TOOLS:%=.tools/%/.installed)
# Only `make bench` needs these: the baselines the database output is measured against (Debezium's
# JDBC sink connector, the PostgreSQL JDBC driver of Spark's JDBC writer).
BENCH_JVM_TOOLS := debezium-jdbc jdbc-drivers
BENCH_JVM_STAMPS := $(BENCH_JVM_TOOLS:%=.tools/%/.installed)

$(JVM_STAMPS) $(BENCH_JVM_STAMPS): .tools/%/.installed: jvm/%/pom.xml scripts/check-jvm-tools.sh
	@scripts/check-jvm-tools.sh
	@echo "== fetching the jars of jvm/$*/pom.xml (Maven Central) into .tools/$*/jars"
	@rm -rf .tools/$*.new && mkdir -p .tools/$*.new
	mvn -q -B -f jvm/$*/pom.xml dependency:copy-dependencies \
	  -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.tools/$*.new/jars
	@rm -rf .tools/$* && mv .tools/$*.new .tools/$*
	@touch $@

jvm-tools: $(JVM_STAMPS)

bench-tools: jvm-tools
	@$(MAKE) --no-print-directory -j1 $(BENCH_JVM_STAMPS)

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

# The project's own code compiled once: with PYTHONDONTWRITEBYTECODE set (as on this machine) the
# hundreds of processes a test run starts (CLI runs, Spark workers, Airflow tasks) would each
# compile it again (0.35 s against 0.24 s to import the CLI, measured).
bytecode: venv
	@$(BIN)/python -m compileall -q -j 0 provider dags spark_apps tests scripts bench >/dev/null

# The installs that do not share anything run side by side: Debian's packages with one apt-get (one
# dpkg lock), the venv with pip/uv, Azurite with npm, the JVM tools with mvn one POM after another
# (Maven's local repository is not safe for two runs at once).
setup: prereqs
	@$(MAKE) --no-print-directory -j4 debian-prereqs venv azurite jvm-tools-one-by-one

# What the edit loop's tier needs: the venv and the JVM tools (no browser, no Azure emulator).
setup-core: prereqs
	@$(MAKE) --no-print-directory -j2 venv jvm-tools-one-by-one

jvm-tools-one-by-one:
	@$(MAKE) --no-print-directory -j1 jvm-tools

# Kafka's classes recorded once (dev/kafka.py), so no broker of the tests or the demo starts without
# the archive and spends its stop writing it (~5 s each, at the end of every test worker).
kafka-archive: venv jvm-tools
	@$(BIN)/python -c "from kafka_batch_provider.dev.kafka import record_class_archive as r; print(r())"

# Spark's classes recorded once, so every spark-submit batch starts from the archive (~40 s, once;
# nothing when it is there).
spark-archive: venv
	@$(BIN)/kafka-batch spark-archive build

# What runs once the installs are done, side by side (two JVMs recording archives, lint, bytecode).
after-setup:
	@$(MAKE) --no-print-directory -j4 lint bytecode kafka-archive spark-archive native

test: setup
	@$(MAKE) --no-print-directory after-setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The edit loop's tier, within 3 minutes on a checkout that ran `make test` or `make check` once:
# lint, the unit tests and the fast integration tests (marker `check`, docs/testing.md). `make test`
# stays the whole suite, and the one CI runs.
check: setup-core
	@$(MAKE) --no-print-directory after-setup
	$(BIN)/python -m pytest -m check $(PYTEST_ARGS)

demo: prereqs postgres-prereqs venv native jvm-tools bytecode kafka-archive spark-archive
	$(BIN)/python scripts/demo.py

# The live Airflow services with the project's DAGs, Apache Kafka and the embedded S3 server (Ctrl-C stops).
airflow: prereqs venv native jvm-tools spark-archive
	$(BIN)/python scripts/live_airflow.py

bench: prereqs venv native jvm-tools bench-tools spark-archive
	$(BIN)/python bench/bench.py $(BENCH_ARGS)

# The documentation site (mkdocs.yml, docs/) built into site/, offline; strict: a broken link,
# anchor or docstring fails it. tests/release/test_docs_site.py builds it too, in the suite.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean --quiet

# The release's sdist and wheel in dist/ (the wheel built from the sdist, as a release builds it;
# setuptools pinned by constraints.txt), checked as PyPI checks them. Only uv and twine are needed,
# in a venv of their own: no Java, no project venv. tests/release/test_wheel.py builds, checks and
# installs them the same way.
DIST_VENV := .venv-dist

$(DIST_VENV)/.installed: constraints.txt
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet -c constraints.txt uv twine
	@touch $@

dist: $(DIST_VENV)/.installed native-prereqs
	rm -rf dist
	$(DIST_VENV)/bin/uv build --quiet --build-constraint constraints.txt --out-dir dist
	@# The native reader's wheel of its own (native/: needs gcc and librdkafka-dev).
	$(DIST_VENV)/bin/uv build --quiet --build-constraint constraints.txt --out-dir dist native
	$(DIST_VENV)/bin/python -m twine check --strict dist/*

# Re-pin after changing dependencies in setup.cfg (needs the package registry).
constraints: venv
	@{ echo "# Exact versions for 'pip install -c constraints.txt' (Airflow's constraints style)."; \
	   echo "# Regenerate: make constraints (after changing setup.cfg), then review the diff."; \
	   $(BIN)/python -m pip freeze --all --exclude-editable | grep -v '^airflow-provider-kafka-batch'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .airflow .airflow-live .kafka-batch .demo .bench .pytest_cache site dist $(DIST_VENV)
