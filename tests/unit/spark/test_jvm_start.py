"""How a spark-submit batch starts: its settings, the class archive's name, pyspark's import path,
and where the Airflow operator finds spark-submit (no JVM is started here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.spark import class_archive, jvm_start
from kafka_batch_provider.spark.jvm_start import (
    DAEMON_MODULE,
    DRIVER_JAVA_OPTIONS,
    LEAN_JAVA_OPTIONS,
    archive_key,
    class_archive_path,
    lean_submit_conf,
)
from kafka_batch_provider.spark.worker_daemon import bundled_zips_of_installed_pyspark, use_installed_pyspark

LEAN = " ".join(LEAN_JAVA_OPTIONS)


@pytest.fixture(autouse=True)
def spark_conf_dir(monkeypatch, tmp_path) -> Path:
    """No spark-defaults.conf of this machine's Spark: each test writes its own."""
    folder = tmp_path / "spark-conf"
    folder.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(folder))
    return folder


@pytest.fixture
def no_archive(monkeypatch):
    monkeypatch.setenv(jvm_start.ARCHIVE_ENV, "off")


@pytest.fixture
def archive(monkeypatch, tmp_path) -> Path:
    path = tmp_path / "classes.jsa"
    path.write_bytes(b"archive")
    monkeypatch.setenv(jvm_start.ARCHIVE_ENV, str(path))
    return path


# -- the settings of a batch ------------------------------------------------------------------------


def test_a_local_batch_gets_the_lean_jvm_no_ui_and_the_worker_daemon(no_archive):
    conf = lean_submit_conf("local[2]", {"spark.log.level": "WARN"})
    assert conf == {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.daemon.module": DAEMON_MODULE,
        DRIVER_JAVA_OPTIONS: LEAN,
        "spark.log.level": "WARN",
    }, f"found {conf}"


def test_the_archive_is_mapped_when_it_exists_and_not_when_it_does_not(archive):
    assert lean_submit_conf("local[*]")[DRIVER_JAVA_OPTIONS] == f"{LEAN} -XX:SharedArchiveFile={archive}"
    archive.unlink()
    assert lean_submit_conf("local[*]")[DRIVER_JAVA_OPTIONS] == LEAN, "a missing archive must not be named"


def test_the_users_settings_win_and_their_java_options_come_last(archive):
    conf = lean_submit_conf(
        "local[2]", {"spark.ui.enabled": "true", DRIVER_JAVA_OPTIONS: "-XX:TieredStopAtLevel=4 -Dx=1"}
    )
    assert conf["spark.ui.enabled"] == "true", f"expected the user's UI setting to win, found {conf}"
    expected = f"{LEAN} -XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=4 -Dx=1"
    assert conf[DRIVER_JAVA_OPTIONS] == expected, f"expected {expected!r}, found {conf[DRIVER_JAVA_OPTIONS]!r}"


@pytest.mark.parametrize(
    "settings",
    [{DRIVER_JAVA_OPTIONS: "-XX:+UseG1GC -Dx=1"}, {"spark.driver.defaultJavaOptions": "-XX:+UseParallelGC"}],
    ids=["the user's", "the administrator's"],
)
def test_a_collector_chosen_elsewhere_replaces_the_serial_one(settings, no_archive):
    options = lean_submit_conf("local[2]", settings)[DRIVER_JAVA_OPTIONS]
    assert "-XX:+UseSerialGC" not in options, f"a JVM refuses two collectors, found {options!r}"
    assert "-XX:TieredStopAtLevel=1" in options, f"expected the rest of the lean flags, found {options!r}"


def test_the_driver_options_of_spark_defaults_are_kept(spark_conf_dir, no_archive):
    (spark_conf_dir / "spark-defaults.conf").write_text(
        "# site settings\nspark.driver.extraJavaOptions  -Djava.security.krb5.conf=/etc/krb5.conf\nspark.x=1\n"
    )
    options = lean_submit_conf("local[2]")[DRIVER_JAVA_OPTIONS]
    assert options == f"{LEAN} -Djava.security.krb5.conf=/etc/krb5.conf", f"found {options!r}"
    mine = lean_submit_conf("local[2]", {DRIVER_JAVA_OPTIONS: "-Dmine=1"})[DRIVER_JAVA_OPTIONS]
    assert mine == f"{LEAN} -Dmine=1", f"expected the run's own options to replace the file's, found {mine!r}"


def test_an_archive_path_with_spaces_stays_one_java_option(monkeypatch, tmp_path):
    path = tmp_path / "my archives" / "classes.jsa"
    path.parent.mkdir()
    path.write_bytes(b"archive")
    monkeypatch.setenv(jvm_start.ARCHIVE_ENV, str(path))
    options = lean_submit_conf("local[2]")[DRIVER_JAVA_OPTIONS]
    assert options == f'{LEAN} "-XX:SharedArchiveFile={path}"', f"Spark splits unquoted options at spaces: {options!r}"


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://k:443", "local-cluster[2,1,512]"])
def test_cluster_workers_keep_their_own_daemon(master, no_archive):
    conf = lean_submit_conf(master)
    assert "spark.python.daemon.module" not in conf, f"{master}: executors may not have this package, found {conf}"
    assert conf[DRIVER_JAVA_OPTIONS] == LEAN, "the client-mode driver still starts lean"


def test_a_driver_that_runs_elsewhere_gets_no_java_options(archive):
    conf = lean_submit_conf("yarn", {DRIVER_JAVA_OPTIONS: "-Dmine=1"}, local_driver=False)
    assert conf[DRIVER_JAVA_OPTIONS] == "-Dmine=1", f"expected only the user's options, found {conf}"


def test_a_server_keeps_the_optimising_compiler_but_maps_the_archive(archive):
    conf = lean_submit_conf("local[2]", short_lived=False)
    assert conf == {
        "spark.python.daemon.module": DAEMON_MODULE,
        DRIVER_JAVA_OPTIONS: f"-XX:SharedArchiveFile={archive}",
    }, f"found {conf}"


@pytest.mark.parametrize("lean", [True, False])
def test_a_lean_spark_connect_server_runs_the_batches_jvm_and_a_lasting_one_keeps_the_optimising_compiler(
    lean, no_archive
):
    from kafka_batch_provider.dev.spark_connect import SparkConnectServer

    command = SparkConnectServer(port=15099, master="local[2]", lean=lean).command()
    options = [
        command[i + 1] for i, arg in enumerate(command) if arg == "--conf" and "extraJavaOptions" in command[i + 1]
    ]
    found = options[0].split("=", 1)[1] if options else ""
    assert (found == LEAN) if lean else (found == ""), (
        f"expected {'the lean flags' if lean else 'none'}, found {found!r}"
    )


# -- the class archive ----------------------------------------------------------------------------


def fake_install(root: Path) -> tuple[Path, Path]:
    java = root / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    jars = root / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core_2.13-4.3.0.jar", "spark-sql_2.13-4.3.0.jar"):
        (jars / name).write_bytes(b"jar")
    return java, root / "spark"


def test_the_archive_key_changes_with_the_jars_and_the_java(tmp_path):
    java, home = fake_install(tmp_path)
    key = archive_key(str(java), home)
    assert archive_key(str(java), home) == key, "expected the same key for the same installation"
    (home / "jars" / "spark-core_2.13-4.3.0.jar").write_bytes(b"another build")
    changed_jar = archive_key(str(java), home)
    assert changed_jar != key, "expected a new key when a jar changed"
    java.write_text("#!/bin/sh\n# another JDK build\n")
    assert archive_key(str(java), home) != changed_jar, "expected a new key when the JDK changed"


def test_the_archive_path_follows_the_setting(monkeypatch, tmp_path):
    java, home = fake_install(tmp_path)
    monkeypatch.setenv("JAVA_HOME", str(java.parent.parent))
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.delenv(jvm_start.ARCHIVE_ENV, raising=False)
    default = class_archive_path()
    assert default is not None and default.name == f"spark-classes-{archive_key(str(java), home)}.jsa", default
    monkeypatch.setenv(jvm_start.ARCHIVE_ENV, "off")
    assert class_archive_path() is None, "expected no archive when switched off"
    monkeypatch.setenv(jvm_start.ARCHIVE_ENV, str(tmp_path / "mine.jsa"))
    assert class_archive_path() == tmp_path / "mine.jsa"


def test_an_archive_is_found_in_either_folder_whoever_may_write_there(monkeypatch, tmp_path):
    java, home = fake_install(tmp_path)
    monkeypatch.setenv("JAVA_HOME", str(java.parent.parent))
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.delenv(jvm_start.ARCHIVE_ENV, raising=False)
    environment, cache = tmp_path / "venv-share", tmp_path / "cache"
    monkeypatch.setattr(jvm_start, "archive_dirs", lambda: [environment, cache])
    monkeypatch.setattr(jvm_start, "default_archive_dir", lambda: cache)  # this user cannot write the venv
    name = f"spark-classes-{archive_key(str(java), home)}.jsa"
    assert class_archive_path() == cache / name, "expected a new archive to go to the cache"
    environment.mkdir()
    (environment / name).write_bytes(b"archive built by the installer")
    assert class_archive_path() == environment / name, "expected the installer's archive to be found"


def test_only_other_archives_in_the_environments_folder_count_as_stale(monkeypatch, tmp_path):
    monkeypatch.setattr(class_archive, "archive_dirs", lambda: [tmp_path, tmp_path / "cache"])
    monkeypatch.delenv(jvm_start.ARCHIVE_ENV, raising=False)
    current, old, other = (tmp_path / name for name in ("spark-classes-new.jsa", "spark-classes-old.jsa", "notes.jsa"))
    for path in (current, old, other):
        path.write_bytes(b"archive")
    assert class_archive.stale_archives(current) == [old], "expected only the older archive to be stale"
    (tmp_path / "cache").mkdir()
    shared = tmp_path / "cache" / "spark-classes-new.jsa"
    assert class_archive.stale_archives(shared) == [], "expected the shared cache's archives to be left alone"
    monkeypatch.setenv(jvm_start.ARCHIVE_ENV, str(current))
    assert class_archive.stale_archives(current) == [], "expected a configured archive's folder to be left alone"


# -- pyspark from site-packages, not from Spark's zip ----------------------------------------------


def installed_pyspark(site: Path) -> Path:
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "py4j").mkdir()
    (site / "py4j" / "__init__.py").write_text("")
    return lib


def test_only_the_zips_inside_an_installed_pyspark_are_dropped(tmp_path, monkeypatch):
    lib = installed_pyspark(tmp_path / "site")
    distribution = tmp_path / "opt" / "spark" / "python" / "lib"  # a Spark download: its zip is all there is
    path = [
        str(lib / "pyspark.zip"),
        str(lib / "py4j-0.10.9.9-src.zip"),
        str(distribution / "pyspark.zip"),
        str(tmp_path / "app"),
        str(tmp_path / "site"),
    ]
    assert bundled_zips_of_installed_pyspark(path) == path[:2]
    monkeypatch.setattr(sys, "path", list(path))
    use_installed_pyspark()
    assert sys.path == path[2:], f"expected the installed copy's zips gone and the rest kept, found {sys.path}"


def test_a_zip_stays_when_this_python_cannot_import_pyspark_otherwise(tmp_path, monkeypatch):
    lib = installed_pyspark(tmp_path / "site")
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(tmp_path / "elsewhere")]
    monkeypatch.setattr(sys, "path", list(path))
    use_installed_pyspark()  # site-packages of that pyspark is not on this path
    assert sys.path == path, f"expected every zip kept, found {sys.path}"


# -- spark-submit when PATH has none (Airflow started from a virtualenv it did not activate) ----------


def test_the_operator_finds_spark_submit_next_to_its_python(monkeypatch, tmp_path):
    from kafka_batch_provider.operators.spark import spark_submit_directory

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "spark-submit").write_text("#!/bin/sh\n")
    (bin_dir / "spark-submit").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert spark_submit_directory("spark-submit") == str(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin")
    assert spark_submit_directory("spark-submit") is None, "expected PATH to be used when it has the binary"


def test_no_spark_submit_anywhere_is_one_line_that_says_what_to_do(monkeypatch, tmp_path):
    from kafka_batch_provider.operators.spark import spark_submit_directory

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError) as refused:
        spark_submit_directory("spark3-submit")
    message = str(refused.value)
    assert "\n" not in message and "spark3-submit" in message and "spark-binary" in message, message
