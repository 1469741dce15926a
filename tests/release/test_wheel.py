"""The package as users install it: the sdist and wheel a release builds, checked, then the wheel
installed into a clean virtualenv (not the project's editable install) and used there: its
command line, its Airflow provider entry point, Airflow's discovery of what it declares, the
shipped DAGs, and one real batch from Kafka to Parquet. The fixtures are in ``conftest.py``.
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import kafka_batch_provider
from tests.dags.test_dag_integrity import EXPECTED_DAGS
from tests.release.conftest import CONSTRAINTS, DIST_NAME, ROOT, Dists, Timed, WheelVenv, source_tree_files, tail

# One worker builds and installs once for every test here (the fixtures are module-scoped).
pytestmark = pytest.mark.xdist_group("release-wheel")

PACKAGE = "kafka_batch_provider"
VERSION = kafka_batch_provider.__version__  # the source's, which the built metadata must carry
DIST_INFO = f"airflow_provider_kafka_batch-{VERSION}.dist-info"
SDIST_ROOT = f"airflow_provider_kafka_batch-{VERSION}"
#: the sdist's files a rebuild needs besides the package: the build configuration, the long
#: description (setup.cfg reads README.md), the metadata
SDIST_BUILD_FILES = {"PKG-INFO", "setup.cfg", "pyproject.toml", "README.md"}
#: The only module of the wheel that needs a package its [airflow] install lacks: the pytest
#: plugin (its docstring: enable it in a conftest.py) needs pytest.
NEEDS_TEST_TOOLS = {f"{PACKAGE}.testing.pytest_plugin": "pytest"}


def package_sources(dists: Dists) -> set[str]:
    """The package's files as the wheel names them: every file of provider/kafka_batch_provider
    in the tree the dists were built from (git's tracked files and new ones not ignored)."""
    prefix = f"provider/{PACKAGE}/"
    return {name.removeprefix("provider/") for name in dists.source_files if name.startswith(prefix)}


def git_tracked_package_files() -> set[str]:
    """``git ls-files provider/kafka_batch_provider`` (less files deleted in the work tree)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", f"provider/{PACKAGE}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {name.removeprefix("provider/") for name in listed.stdout.split("\0") if name and (ROOT / name).is_file()}


def setup_cfg_requirements() -> dict[str | None, set[tuple]]:
    """setup.cfg's install_requires (key ``None``) and each extra's requirements, normalised."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "setup.cfg")

    def lines(value: str) -> list[str]:
        return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]

    found: dict[str | None, set[tuple]] = {
        None: {normalised(Requirement(r)) for r in lines(parser["options"]["install_requires"])}
    }
    for extra, value in parser["options.extras_require"].items():
        found[extra] = {normalised(Requirement(r)) for r in lines(value)}
    return found


def normalised(requirement: Requirement) -> tuple:
    return (
        canonicalize_name(requirement.name),
        tuple(sorted(requirement.extras)),
        tuple(sorted(str(s) for s in requirement.specifier)),
    )


def metadata_requirements(metadata) -> dict[str | None, set[tuple]]:
    """The METADATA's Requires-Dist, grouped by the extra whose marker selects them."""
    extras = metadata.get_all("Provides-Extra") or []
    found: dict[str | None, set[tuple]] = {None: set(), **{extra: set() for extra in extras}}
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None:
            found[None].add(normalised(requirement))
            continue
        selected = [extra for extra in extras if requirement.marker.evaluate({"extra": extra})]
        assert len(selected) == 1, f"Requires-Dist {line!r}: expected one extra to select it, found {selected}"
        found[selected[0]].add(normalised(requirement))
    return found


def license_files(dists: Dists) -> list[str]:
    """The top-level files setuptools ships as license texts by default (LICEN[CS]E*, COPYING*,
    NOTICE*, AUTHORS*)."""
    patterns = ("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS")
    return [name for name in dists.source_files if "/" not in name and name.startswith(patterns)]


def last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, f"expected exit 0:\n{tail(result)}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- the built distributions ---------------------------------------------------------------------


def test_twine_check_strict_passes_on_the_sdist_and_the_wheel(dists: Dists):
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists.sdist), str(dists.wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"expected twine check --strict to pass on both:\n{tail(result)}"
    assert result.stdout.count("PASSED") == 2, f"expected two PASSED lines, found:\n{result.stdout}"


def test_the_wheel_holds_every_package_file_and_nothing_else(dists: Dists):
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
    in_package = {n for n in names if n.startswith(f"{PACKAGE}/")}
    expected = package_sources(dists)
    tracked = git_tracked_package_files()
    assert tracked <= in_package, f"git-tracked files missing from the wheel: {sorted(tracked - in_package)}"
    assert in_package == expected, (
        f"the wheel's package files differ from provider/{PACKAGE}: missing {sorted(expected - in_package)}, "
        f"unexpected {sorted(in_package - expected)}"
    )
    tops = {n.split("/")[0] for n in names}
    assert tops == {PACKAGE, DIST_INFO}, f"expected only {PACKAGE}/ and {DIST_INFO}/ in the wheel, found {sorted(tops)}"
    stray = sorted(n for n in names if "/tests/" in f"/{n}" or "__pycache__" in n or n.endswith(".pyc"))
    assert not stray, f"expected no tests, __pycache__ or bytecode in the wheel, found {stray}"


def test_the_wheel_metadata_names_the_version_entry_points_and_requirements_of_setup_cfg(dists: Dists):
    with zipfile.ZipFile(dists.wheel) as wheel:
        metadata = Parser().parsestr(wheel.read(f"{DIST_INFO}/METADATA").decode())
        entry_points = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        entry_points.read_string(wheel.read(f"{DIST_INFO}/entry_points.txt").decode())
        top_level = wheel.read(f"{DIST_INFO}/top_level.txt").decode().split()
    assert (metadata["Name"], metadata["Version"]) == (DIST_NAME, VERSION), (
        f"expected {DIST_NAME} {VERSION} ({PACKAGE}.__version__), found {metadata['Name']} {metadata['Version']}"
    )
    assert metadata["Requires-Python"] == ">=3.11", (
        f"expected Requires-Python >=3.11, found {metadata['Requires-Python']}"
    )
    assert top_level == [PACKAGE], f"expected top_level.txt to name {PACKAGE} only, found {top_level}"
    scripts = dict(entry_points["console_scripts"]) if entry_points.has_section("console_scripts") else {}
    assert scripts == {"kafka-batch": "kafka_batch_provider.cli:main"}, f"console scripts: {scripts}"
    providers = (
        dict(entry_points["apache_airflow_provider"]) if entry_points.has_section("apache_airflow_provider") else {}
    )
    assert providers == {"provider_info": "kafka_batch_provider:get_provider_info"}, (
        f"expected apache_airflow_provider provider_info = kafka_batch_provider:get_provider_info, found {providers}"
    )
    expected, found = setup_cfg_requirements(), metadata_requirements(metadata)
    assert set(found) == set(expected), (
        f"extras: setup.cfg has {sorted(map(str, expected))}, METADATA {sorted(map(str, found))}"
    )
    differ = {
        str(k): {"setup.cfg": sorted(expected[k]), "METADATA": sorted(found[k])}
        for k in expected
        if expected[k] != found[k]
    }
    assert not differ, f"Requires-Dist differs from setup.cfg: {differ}"


def test_the_sdist_holds_what_a_rebuild_needs_and_the_wheel_was_built_from_it(dists: Dists):
    with tarfile.open(dists.sdist) as sdist:
        members = {m.name.removeprefix(f"{SDIST_ROOT}/") for m in sdist.getmembers() if m.isfile()}
        pkg_info = Parser().parsestr(sdist.extractfile(f"{SDIST_ROOT}/PKG-INFO").read().decode())
    assert SDIST_BUILD_FILES <= members, (
        f"expected {sorted(SDIST_BUILD_FILES)} in the sdist, missing {sorted(SDIST_BUILD_FILES - members)}"
    )
    package = {m.removeprefix("provider/") for m in members if m.startswith(f"provider/{PACKAGE}/")}
    expected = package_sources(dists)
    assert package == expected, (
        f"the sdist's package files differ from the source: missing {sorted(expected - package)}, "
        f"unexpected {sorted(package - expected)}"
    )
    stray = sorted(m for m in members if m.startswith("tests/") or "__pycache__" in m or m.endswith(".pyc"))
    assert not stray, f"expected no tests or bytecode in the sdist, found {stray}"
    assert pkg_info["Version"] == VERSION, f"expected PKG-INFO version {VERSION}, found {pkg_info['Version']}"
    # A license text at the top (setuptools' default license-files patterns) ships in both.
    with zipfile.ZipFile(dists.wheel) as wheel:
        in_wheel = set(wheel.namelist())
    for name in license_files(dists):
        assert name in members, f"expected the license file {name} in the sdist, found {sorted(members)[:20]}"
        assert f"{DIST_INFO}/licenses/{name}" in in_wheel, f"expected {DIST_INFO}/licenses/{name} in the wheel"
    # uv builds the sdist, then the wheel from the unpacked sdist: what the sdist lacks, the wheel lacks.
    assert "Building wheel from source distribution" in dists.build_log, (
        f"expected the wheel built from the sdist; uv's log:\n{dists.build_log[-2000:]}"
    )


# -- the wheel installed into a clean virtualenv -------------------------------------------------

WHERE_FROM = r"""
import importlib.metadata, json, os, sys, glob
import kafka_batch_provider, pyspark
dist = importlib.metadata.distribution("airflow-provider-kafka-batch")
jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "spark-core_*.jar"))
print(json.dumps({
    "file": kafka_batch_provider.__file__, "version": kafka_batch_provider.__version__,
    "dist_version": dist.version, "direct_url": json.loads(dist.read_text("direct_url.json") or "{}"),
    "sys_path": sys.path, "pyspark": pyspark.__version__, "pyspark_file": pyspark.__file__,
    "pyspark_jars": os.path.basename(jars[0]).rsplit("-", 1)[-1].removesuffix(".jar") if jars else None,
}))
"""


def test_the_provider_is_imported_from_the_installed_wheel(wheel_venv: WheelVenv, dists: Dists):
    found = wheel_venv.python_json(WHERE_FROM, timeout=120)
    package_dir = wheel_venv.site_packages / PACKAGE
    assert Path(found["file"]) == package_dir / "__init__.py", (
        f"expected {PACKAGE} imported from {package_dir}, found {found['file']} (sys.path {found['sys_path']})"
    )
    assert not any(p.startswith(str(ROOT)) for p in found["sys_path"]), (
        f"the repository is on sys.path: {found['sys_path']}"
    )
    assert found["version"] == found["dist_version"] == VERSION, f"expected version {VERSION}, found {found}"
    url, editable = found["direct_url"].get("url", ""), found["direct_url"].get("dir_info", {}).get("editable")
    assert url.endswith(dists.wheel.name) and not editable, (
        f"expected installed from {dists.wheel.name}, found {found['direct_url']}"
    )
    # The README's pyspark reinstall: pyspark's Python files match its jars (pyspark-client's do not).
    assert found["pyspark"] == found["pyspark_jars"], (
        f"expected pyspark's Python files to match its jars, found {found['pyspark']} and jars {found['pyspark_jars']}"
    )
    print(f"build: {dists.timing.describe()}; install: {wheel_venv.timing.describe()}")


IMPORT_EVERY_MODULE = r"""
import importlib, json, pkgutil
import kafka_batch_provider
failed, imported = {}, ["kafka_batch_provider"]
for module in pkgutil.walk_packages(kafka_batch_provider.__path__, "kafka_batch_provider."):
    if module.name.endswith(".__main__"):
        continue  # runs the command line
    try:
        importlib.import_module(module.name)
        imported.append(module.name)
    except ModuleNotFoundError as error:
        failed[module.name] = error.name
    except BaseException as error:
        failed[module.name] = f"{type(error).__name__}: {error}"
print(json.dumps({"failed": failed, "imported": imported}))
"""


def test_every_module_of_the_wheel_imports_with_only_the_airflow_extra(wheel_venv: WheelVenv, dists: Dists):
    # A test-only import (pytest, hypothesis, moto, ...) or a module the wheel lacks fails here.
    found = wheel_venv.python_json(IMPORT_EVERY_MODULE, timeout=300)
    assert found["failed"] == NEEDS_TEST_TOOLS, (
        f"expected every module to import with [airflow] installed (but {NEEDS_TEST_TOOLS}), "
        f"failures: {found['failed']}"
    )
    files = {n.removesuffix(".py").removesuffix("/__init__") for n in package_sources(dists) if n.endswith(".py")}
    modules = {n.replace("/", ".") for n in files if not n.endswith("__main__")}
    walked = set(found["imported"]) | set(found["failed"])
    assert walked == modules, f"expected every module walked: not walked {sorted(modules - walked)}"


def test_the_console_script_prints_its_version_and_help(wheel_venv: WheelVenv):
    script = wheel_venv.bin("kafka-batch")
    # '#!<python>', or for a long path '#!/bin/sh' and an exec line naming it
    head = script.read_text().splitlines()[:2]
    assert head[0] == f"#!{wheel_venv.python}" or str(wheel_venv.python) in head[1], (
        f"expected kafka-batch to run {wheel_venv.python}, its first lines: {head}"
    )
    version = wheel_venv.run(["kafka-batch", "--version"], timeout=120)
    assert version.returncode == 0 and version.stdout.strip() == f"kafka-batch {VERSION}", (
        f"expected 'kafka-batch {VERSION}':\n{tail(version)}"
    )
    helped = wheel_venv.run(["kafka-batch", "--help"], timeout=120)
    assert helped.returncode == 0, f"expected kafka-batch --help to exit 0:\n{tail(helped)}"
    for command in ("plan", "write", "commit", "run", "table", "lag", "upkeep"):
        assert command in helped.stdout, f"expected the {command} command in --help:\n{helped.stdout[:1500]}"


FIRST_LOAD = r"""
import importlib.metadata, json, sys
found = [e for e in importlib.metadata.entry_points(group="apache_airflow_provider")
         if e.value.startswith("kafka_batch_provider")]
info = found[0].load()() if len(found) == 1 else {}
print(json.dumps({
    "entry_points": [[e.name, e.value, e.dist.name, e.dist.version] for e in found],
    "info": info,
    "airflow": sorted(m for m in sys.modules if m.split(".")[0] == "airflow"),
    "hooks": sorted(m for m in sys.modules if m.startswith("kafka_batch_provider.hooks")),
    "file": getattr(sys.modules.get("kafka_batch_provider"), "__file__", None),
}))
"""


def test_the_provider_entry_point_loads_first_in_a_fresh_process_without_airflow(wheel_venv: WheelVenv):
    found = wheel_venv.python_json(FIRST_LOAD, timeout=120)
    expected = [["provider_info", "kafka_batch_provider:get_provider_info", DIST_NAME, VERSION]]
    assert found["entry_points"] == expected, f"expected the entry point {expected}, found {found['entry_points']}"
    assert found["info"].get("package-name") == DIST_NAME and found["info"].get("versions") == [VERSION], (
        f"expected the provider info to name {DIST_NAME} {VERSION}, found {found['info'].get('package-name')} "
        f"{found['info'].get('versions')}"
    )
    assert found["info"] == json.loads(json.dumps(kafka_batch_provider.get_provider_info())), (
        "expected the installed provider info to be the source's"
    )
    assert found["airflow"] == [] and found["hooks"] == [], (
        "expected get_provider_info to import neither Airflow nor a hook, "
        f"found {found['airflow'][:10]} {found['hooks']}"
    )
    assert found["file"] == str(wheel_venv.site_packages / PACKAGE / "__init__.py"), f"loaded from {found['file']}"


PROVIDERS_MANAGER = r"""
import importlib, json, warnings
warnings.simplefilter("ignore")  # ProvidersManager's notices that the task SDK has its own manager
from airflow.providers_manager import ProvidersManager
from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

NAME = "airflow-provider-kafka-batch"
core, runtime = ProvidersManager(), ProvidersManagerTaskRuntime()
info = core.providers.get(NAME)
declared = info.data if info else {}
conn_types = [c["connection-type"] for c in declared.get("connection-types", [])]
schemes = [s for a in declared.get("asset-uris", []) for s in a["schemes"]]


def dotted(obj):
    return None if obj is None else f"{obj.__module__}.{obj.__qualname__}"


def hook(manager, conn_type):
    found = manager.hooks.get(conn_type)
    return found and {"class": found.hook_class_name, "package": found.package_name, "name": found.hook_name}


def assets(manager):
    kinds = {"handler": "asset_uri_handlers", "factory": "asset_factories",
             "to_openlineage_converter": "asset_to_openlineage_converters"}
    return {kind: {s: dotted(getattr(manager, attr).get(s)) for s in schemes} for kind, attr in kinds.items()}


named = {m for section in ("hooks", "sensors", "triggers", "operators") for s in declared.get(section, [])
         for m in s["python-modules"]}
named = sorted(named | {c["hook-class-name"].rsplit(".", 1)[0] for c in declared.get("connection-types", [])})
failed = {}
for module in named:
    try:
        importlib.import_module(module)
    except BaseException as error:
        failed[module] = f"{type(error).__name__}: {error}"
print(json.dumps({
    "providers": sorted(core.providers), "runtime_providers": sorted(runtime.providers),
    "version": info.version if info else None, "data": declared,
    "ui": {m.connection_type: {"hook_name": m.hook_name, "hook_class_name": m.hook_class_name,
                               "field_behaviour": m.field_behaviour}
           for m in core.iter_connection_type_hook_ui_metadata() if m.connection_type in conn_types},
    "core_hooks": {c: hook(core, c) for c in conn_types}, "runtime_hooks": {c: hook(runtime, c) for c in conn_types},
    "field_behaviours": {c: core.field_behaviours.get(c) for c in conn_types},
    "triggers": sorted(t.trigger_class_name for t in core.trigger if t.package_name == NAME),
    "assets": {"core": assets(core), "runtime": assets(runtime)},
    "modules": named, "failed_imports": failed,
}))
"""


def test_airflow_discovers_everything_the_provider_info_declares(wheel_venv: WheelVenv):
    declared = json.loads(json.dumps(kafka_batch_provider.get_provider_info()))
    found = wheel_venv.python_json(PROVIDERS_MANAGER, timeout=300)
    for manager in ("providers", "runtime_providers"):
        assert DIST_NAME in found[manager], f"expected {DIST_NAME} among Airflow's {manager}, found {found[manager]}"
    assert found["version"] == VERSION, (
        f"expected ProvidersManager to list {DIST_NAME} {VERSION}, found {found['version']}"
    )
    # Airflow adds documentation-url (the metadata's Project-URL "Documentation", None without one).
    same = {key: found["data"].get(key) for key in declared}
    assert same == declared, (
        f"expected Airflow's provider info for {DIST_NAME} to be the source's, found {found['data']}"
    )
    assert found["failed_imports"] == {} and found["modules"], (
        f"expected every module the provider info names to import, failures: {found['failed_imports']}"
    )
    for connection in declared["connection-types"]:
        kind, hook_class = connection["connection-type"], connection["hook-class-name"]
        expected_hook = {"class": hook_class, "package": DIST_NAME, "name": connection["hook-name"]}
        for manager in ("core_hooks", "runtime_hooks"):
            assert found[manager].get(kind) == expected_hook, (
                f"expected {manager} {kind} -> {expected_hook}, found {found[manager].get(kind)}"
            )
        form = {key.replace("-", "_"): value for key, value in connection["ui-field-behaviour"].items()}
        ui = found["ui"].get(kind) or {}
        assert (ui.get("hook_name"), ui.get("hook_class_name")) == (connection["hook-name"], hook_class), (
            f"expected the connection form's metadata for {kind} to name {hook_class}, found {ui}"
        )
        assert ui.get("field_behaviour") == form, (
            f"expected {kind}'s form {form} without importing the hook, found {ui}"
        )
        assert found["field_behaviours"].get(kind) == form, (
            f"expected {kind}'s form {form} from the hook, found {found['field_behaviours'].get(kind)}"
        )
    triggers = sorted(m for t in declared["triggers"] for m in t["python-modules"])
    assert found["triggers"] == triggers, (
        f"expected Airflow's triggers of {DIST_NAME} {triggers}, found {found['triggers']}"
    )
    for uris in declared["asset-uris"]:
        for manager in ("core", "runtime"):
            for kind in ("handler", "factory", "to_openlineage_converter"):
                expected = {scheme: uris[kind] for scheme in uris["schemes"]}
                assert found["assets"][manager][kind] == expected, (
                    f"expected the {manager} providers manager's asset {kind}s {expected}, "
                    f"found {found['assets'][manager][kind]}"
                )


DAG_PARSE = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(sys.argv[1])
ours = {m: getattr(module, "__file__", None) for m, module in sys.modules.items()
        if m.split(".")[0] == "kafka_batch_provider"}
print(json.dumps({"errors": bag.import_errors, "dag_ids": sorted(bag.dag_ids), "modules": ours}))
"""


def test_the_shipped_dags_parse_with_the_installed_provider(wheel_venv: WheelVenv, tmp_path: Path):
    # The DAG files as a user copies them into a DAG folder of their own (dags/topic_groups.json with them).
    dags = tmp_path / "dags"
    for name in source_tree_files():
        if name.startswith("dags/"):
            (dags / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dags / name)
    # Each shipped DAG refuses to parse without its output (tests/dags/test_dag_integrity.py).
    env = {"KAFKA_BATCH_OUTPUT": str(tmp_path / "lake"), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    result = wheel_venv.run(["python", "-c", DAG_PARSE, dags], timeout=300, env=env)
    found = last_json(result)
    assert found["errors"] == {}, (
        f"expected the DAGs to parse with the installed provider, import errors: {found['errors']}"
    )
    assert EXPECTED_DAGS <= set(found["dag_ids"]), f"expected {sorted(EXPECTED_DAGS)}, found {found['dag_ids']}"
    outside = {m: f for m, f in found["modules"].items() if f and not Path(f).is_relative_to(wheel_venv.site_packages)}
    assert found["modules"] and not outside, (
        f"expected the DAGs to use the installed {PACKAGE}, these came from elsewhere: {outside}"
    )


@pytest.mark.integration
def test_one_cli_batch_end_to_end_from_the_installed_wheel(
    wheel_venv: WheelVenv, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path: Path
):
    from kafka_batch_provider.core.offsets import TopicPartition
    from kafka_batch_provider.kafka.client import KafkaOffsets
    from kafka_batch_provider.testing.producers import produce, sample_records
    from tests.integration.helpers import dataset_keys

    records, partitions = 40, 2
    topic = new_topic(partitions=partitions)
    produce(kafka_config, topic, sample_records(partitions, records))
    out = tmp_path / "lake"
    python = str(wheel_venv.python)
    # Spark's Python workers run the new venv's Python (it has the wheel and its dependencies).
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    args = ["--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id]
    ran = wheel_venv.run(
        ["kafka-batch", "run", *args, "--output", out, "--spark-master", "local[2]"], timeout=420, env=env
    )
    batch = last_json(ran)
    ends = {f"{topic}:{p}": records // partitions for p in range(partitions)}
    assert batch["records"] == records and batch["committed"] == ends, (
        f"expected {records} records and commits {ends}, found {batch.get('records')} and {batch.get('committed')}"
    )

    seen = dataset_keys(str(out))
    expected = {(topic, p, o) for p in range(partitions) for o in range(records // partitions)}
    doubled = sorted(k for k, n in seen.items() if n > 1)
    assert sum(seen.values()) == records and set(seen) == expected and not doubled, (
        f"expected {records} rows, every offset once; found {sum(seen.values())} rows, "
        f"missing {sorted(expected - set(seen))[:5]}, unexpected {sorted(set(seen) - expected)[:5]}, "
        f"doubled {doubled[:5]}"
    )
    kafka = KafkaOffsets(kafka_config)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        committed, end = kafka.committed_offsets(group_id, tps), kafka.log_end_offsets(tps)
    finally:
        kafka.close()
    assert committed == end, f"expected the group's committed offsets at the end offsets {end}, found {committed}"

    listed = last_json(wheel_venv.run(["kafka-batch", "table", "--output", out, "--json"], timeout=120, env=env))
    rows = [(b["batch_id"], b["rows"], b["end_offsets"]) for b in listed["batches"]]
    assert rows == [(batch["batch_id"], records, ends)], f"expected kafka-batch table to list the batch, found {rows}"
    # Without the native reader's wheel (installed apart, below) the python reader reads, and says why.
    said = ran.stdout + ran.stderr
    assert f"{partitions} of {partitions} slice(s) read with the python reader" in said, said[-3000:]
    assert "pip install airflow-provider-kafka-batch-native" in said, f"expected the reason:\n{said[-3000:]}"


@pytest.mark.integration
def test_the_native_readers_wheel_installs_beside_the_provider_and_reads(
    wheel_venv: WheelVenv, kafka_config, kafka_bootstrap_servers, new_topic, tmp_path: Path
):
    from kafka_batch_provider.testing.producers import produce, sample_records

    # Built as make dist builds it: the sdist, then the wheel from it, against the pinned confluent-kafka.
    timing = Timed()
    source, out = tmp_path / "native", tmp_path / "native-dist"
    shutil.copytree(ROOT / "native", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = timing.uv(
        ["build", "--build-constraint", str(CONSTRAINTS), "--out-dir", str(out), str(source)], cwd=tmp_path, timeout=300
    )
    assert built.returncode == 0, f"uv build native failed:\n{tail(built, 40)}"
    [wheel] = out.glob("airflow_provider_kafka_batch_native-*.whl")
    python = str(wheel_venv.python)
    installed = timing.uv(
        ["pip", "install", "--python", python, "-c", str(CONSTRAINTS), str(wheel)], cwd=tmp_path, timeout=300
    )
    assert installed.returncode == 0, f"installing {wheel.name} failed:\n{tail(installed, 40)}"
    try:
        loaded = wheel_venv.python_json(
            "import json, kafka_batch_native as n, confluent_kafka as c; "
            "print(json.dumps([n.__file__, n.librdkafka_version(), c.libversion()[0]]))",
            timeout=120,
        )
        assert Path(loaded[0]).is_relative_to(wheel_venv.site_packages) and loaded[1] == loaded[2], (
            f"expected the native reader from {wheel_venv.site_packages} on confluent-kafka's librdkafka: {loaded}"
        )
        # The installed provider's range reader, as each Spark task runs it (the whole spark-submit path
        # of the installed wheel is test_one_cli_batch_end_to_end_from_the_installed_wheel's).
        topic = new_topic(partitions=1)
        produce(kafka_config, topic, sample_records(1, 40))
        read = wheel_venv.python_json(
            "import json\n"
            "from kafka_batch_provider.core.offsets import OffsetRange\n"
            "from kafka_batch_provider.spark.kafka_reader import ReadStats, read_range\n"
            f"stats = ReadStats({topic!r}, 0, 0, 40, 0)\n"
            f"rows = sum(b.num_rows for b in read_range({{'bootstrap.servers': {kafka_bootstrap_servers!r}}}, "
            f"OffsetRange({topic!r}, 0, 0, 40), stats=stats, stall_timeout=60.0))\n"
            "print(json.dumps([rows, stats.reader, stats.not_native]))",
            timeout=180,
        )
        assert read == [40, "native", ""], f"expected 40 rows read by the native reader, found {read}"
    finally:
        # Back to the provider alone: the other tests of this module use the same venv.
        timing.uv(
            ["pip", "uninstall", "--python", python, "airflow-provider-kafka-batch-native"], cwd=tmp_path, timeout=120
        )
