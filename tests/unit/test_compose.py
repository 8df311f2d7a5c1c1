"""The compose stack (compose/, config/compose.yaml) agrees with itself and with plateau.

Nothing here needs Docker: the files are parsed and cross-checked, and the config the
containers get is loaded with plateau's own loader, as the containers would load it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from bridge.config import Config, load_config
from bridge.config.units import parse_duration
from bridge.local_kafka import DEFAULT_KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "compose"
SERVICES = {"kafka", "plateau", "producer", "producer-direct", "minio", "minio-init", "spark"}
PLATEAU_IMAGE_SERVICES = ("plateau", "producer", "producer-direct", "spark")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def interpolate(value: object) -> str:
    """What compose makes of a value when the shell running it sets no variables."""
    text = re.sub(r"\$\{\w+(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(value))
    return text.replace("$$", "$")


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: interpolate(value) for key, value in env.items()}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (a named volume, or a host path relative to compose/)."""
    found = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        found[target] = source
    return found


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port."""
    found = []
    for port in service.get("ports", []):
        host_ip, host_port, container_port = str(port).rsplit(":", 2)
        found.append((host_ip, int(host_port), int(container_port.split("/")[0])))
    return found


def option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def config_path(service: dict[str, Any]) -> Path:
    """The repository file behind the service's --config, through its bind mounts."""
    inside = PurePosixPath(option(service["command"], "--config") or "")
    for target, source in mounts(service).items():
        if source.startswith(".") and inside.is_relative_to(target):
            return (COMPOSE_DIR / source / inside.relative_to(target)).resolve()
    raise AssertionError(f"--config {inside} is not under a bind mount of the service")


def container_config(services: dict[str, dict[str, Any]], name: str) -> Config:
    """The config the service's container runs with: the file plus its PLATEAU__ variables."""
    service = services[name]
    path = config_path(service)
    assert path.is_relative_to(ROOT / "config"), path
    return load_config(path, env=environment(service))


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def kafka_internal_address(services: dict[str, dict[str, Any]]) -> str:
    """The advertised address of the listener the brokers (and the other services) use."""
    env = environment(services["kafka"])
    advertised = dict(re.findall(r"(\w+)://([^,]+)", env["KAFKA_ADVERTISED_LISTENERS"]))
    listeners = dict(re.findall(r"(\w+)://([^,]+)", env["KAFKA_LISTENERS"]))
    name = env["KAFKA_INTER_BROKER_LISTENER_NAME"]
    address = advertised[name]
    assert host_port(listeners[name])[1] == host_port(address)[1], "advertised another port"
    return address


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) per build stage, continuation lines joined."""
    text = (COMPOSE_DIR / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    stages: list[list[tuple[str, str]]] = []
    for instruction in re.split(r"(?<!\\)\n", "\n".join(lines)):
        joined = re.sub(r"\\\n\s*", " ", instruction).strip()
        if not joined:
            continue
        keyword, _, arguments = joined.partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), arguments.strip()))
    return stages


def instructions(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    return [arguments for found, arguments in stage if found == keyword]


def test_the_stack_has_its_services_and_volumes(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    # compose refuses a named volume that is not declared at the top level.
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for source in mounts(service).values():
            if not source.startswith("."):
                assert source in declared, f"{name} mounts undeclared volume {source!r}"


def test_kafka_is_the_local_broker_version_and_healthy_before_clients(
    services: dict[str, dict[str, Any]],
) -> None:
    kafka = services["kafka"]
    assert kafka["image"] == f"apache/kafka:{DEFAULT_KAFKA_VERSION}"
    assert environment(kafka)["KAFKA_PROCESS_ROLES"] == "broker,controller"
    check = kafka["healthcheck"]["test"]
    assert check[1].startswith("/opt/kafka/bin/") and kafka_internal_address(services) in check
    for client in ("plateau", "producer"):
        assert services[client]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_plateau_services_run_the_image_built_from_the_dockerfile(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in PLATEAU_IMAGE_SERVICES:
        service = services[name]
        assert service["image"] == "plateau:local", name
        build = service["build"]
        assert (COMPOSE_DIR / build["context"]).resolve() == ROOT, name
        assert (ROOT / build["dockerfile"]).resolve() == COMPOSE_DIR / "Dockerfile", name
        # The image's health check is serve's endpoint: only serve can pass it.
        disabled = service.get("healthcheck", {}).get("disable", False)
        assert disabled is (service["command"][0] != "serve"), name


def test_containers_get_a_config_plateau_validates(services: dict[str, dict[str, Any]]) -> None:
    with_config = [n for n, s in services.items() if option(s.get("command") or [], "--config")]
    assert sorted(with_config) == ["plateau", "spark"]
    for name in with_config:
        container_config(services, name)  # raises ConfigError naming the key otherwise
    assert config_path(services["plateau"]) == ROOT / "config" / "compose.yaml"


def test_kafka_address_and_topic(services: dict[str, dict[str, Any]]) -> None:
    config = container_config(services, "plateau")
    internal = kafka_internal_address(services)
    assert host_port(internal)[0] == "kafka" and "kafka" in services
    assert config.kafka.bootstrap_servers == internal
    producer = services["producer"]["command"]
    assert option(producer, "--bootstrap-servers") == config.kafka.bootstrap_servers
    topic = option(producer, "--topic")
    assert topic is not None and config.mapping_for(topic) is not None


def test_the_direct_producer_writes_to_plateaus_kafka_api(
    services: dict[str, dict[str, Any]],
) -> None:
    config = container_config(services, "plateau")
    assert config.kafka_api is not None
    direct = services["producer-direct"]
    assert direct["profiles"] == ["direct"]
    assert option(direct["command"], "--bootstrap-servers") == config.kafka_api.advertised
    topic = option(direct["command"], "--topic")
    assert topic in {m.name for m in config.produced}
    assert direct["depends_on"]["plateau"]["condition"] == "service_healthy"


def test_serve_and_replicate_share_the_store(services: dict[str, dict[str, Any]]) -> None:
    volumes = set()
    for name in ("plateau", "spark"):
        data_dir = container_config(services, name).storage.data_dir
        assert data_dir.is_absolute(), "a relative data_dir would depend on the mount point"
        source = mounts(services[name]).get(str(data_dir))
        assert source is not None and not source.startswith("."), f"{name}: no volume there"
        volumes.add(source)
    assert volumes == {"plateau-data"}


def test_metrics_are_published_on_the_host_loopback_only(
    services: dict[str, dict[str, Any]],
) -> None:
    config = container_config(services, "plateau")
    host, port = config.metrics.address
    assert config.metrics.enabled and host == "0.0.0.0"
    assert published(services["plateau"]) == [("127.0.0.1", port, port)]
    for name, service in services.items():
        for address, _, _ in published(service):
            assert address == "127.0.0.1", f"{name} publishes a port beyond this machine"


def test_stop_grace_period_covers_the_shutdown(services: dict[str, dict[str, Any]]) -> None:
    config = container_config(services, "plateau")
    grace = parse_duration(services["plateau"]["stop_grace_period"])
    assert grace > config.shutdown_timeout


def test_replicas_go_to_the_bucket_minio_init_creates(
    services: dict[str, dict[str, Any]],
) -> None:
    replication = container_config(services, "spark").replication
    target = urlsplit(replication.target or "")
    assert target.scheme == "s3"
    script = interpolate(" ".join(services["minio-init"]["command"]))
    alias_url = re.search(r"mc alias set (\S+) (\S+)", script)
    bucket = re.search(r"mc mb (?:--\S+ )*(\S+)/(\S+)", script)
    assert alias_url is not None and bucket is not None, script
    assert bucket.groups() == (alias_url[1], target.netloc)
    endpoint = replication.s3.endpoint_url
    assert endpoint == alias_url[2]
    assert urlsplit(endpoint).hostname == "minio" and urlsplit(endpoint).port == 9000
    assert services["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"
    spark_deps = services["spark"]["depends_on"]
    assert spark_deps["minio-init"]["condition"] == "service_completed_successfully"


def test_s3_credentials_come_from_compose_and_match_minio(
    services: dict[str, dict[str, Any]],
) -> None:
    s3 = container_config(services, "spark").replication.s3
    assert s3.access_key_id is None and s3.secret_access_key is None, "secrets in the file"
    minio, spark = environment(services["minio"]), environment(services["spark"])
    assert spark["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"] != ""
    assert spark["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"] != ""
    assert len(minio["MINIO_ROOT_PASSWORD"]) >= 8, "MinIO refuses shorter root passwords"
    init = environment(services["minio-init"])
    assert (init["MINIO_ROOT_USER"], init["MINIO_ROOT_PASSWORD"]) == (
        minio["MINIO_ROOT_USER"],
        minio["MINIO_ROOT_PASSWORD"],
    )


def test_dockerfile_installs_plateau_and_runs_it(services: dict[str, dict[str, Any]]) -> None:
    stages = dockerfile_stages()
    runtime = stages[-1]
    bases = {stage[0][1].split()[0] for stage in stages}
    assert len(bases) == 1, "the virtualenv moves between stages: one Python for all"
    python = re.fullmatch(r"python:(\d+\.\d+)-slim-\w+", bases.pop())
    assert python is not None
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(python[1])

    build = [args for stage in stages for args in instructions(stage, "RUN")]
    assert any(re.search(r"\bpip install (--\S+ )*\.$", run) for run in build)
    assert PYPROJECT["project"]["name"] == "plateau"
    # Everything the package is built from: a package missing here installs without it.
    copied = {
        Path(source)
        for stage in stages
        for args in instructions(stage, "COPY")
        if "--from=" not in args
        for source in args.split()[:-1]
    }
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    needed = {Path("pyproject.toml"), Path("setup.py"), Path(PYPROJECT["project"]["readme"])}
    assert needed | {Path(pattern.rstrip("*")) for pattern in include} <= copied
    # setup.py compiles the C extension: the stage that installs needs a compiler, and the
    # runtime (which takes the built virtualenv) does not.
    assert re.search(r"\bgcc\b", " ".join(instructions(stages[0], "RUN")))

    entrypoint = json.loads(instructions(runtime, "ENTRYPOINT")[0])
    assert entrypoint == ["plateau"] and "plateau" in PYPROJECT["project"]["scripts"]
    assert json.loads(instructions(runtime, "CMD")[0]) == services["plateau"]["command"]
    assert instructions(runtime, "USER") == ["plateau"]


def test_dockerfile_java_and_spark_connector() -> None:
    stages = dockerfile_stages()
    runtime_runs = " ".join(instructions(stages[-1], "RUN"))
    java = re.search(r"openjdk-(\d+)-jre-headless", runtime_runs)
    assert java is not None and int(java[1]) >= 17, "Spark 4 needs Java 17 or newer"
    # The connector is built in the build stage: the runtime, which has no javac nor Maven,
    # must look for it where it was put.
    cache_dirs = [
        re.findall(r"PLATEAU_CACHE_DIR=(\S+)", " ".join(instructions(stage, "ENV")))
        for stage in stages
    ]
    assert len(cache_dirs) == 2 and cache_dirs[0] == cache_dirs[1] != []
    assert any("connector_jars()" in run for run in instructions(stages[0], "RUN"))


def test_dockerfile_serves_metrics_where_the_config_listens(
    services: dict[str, dict[str, Any]],
) -> None:
    config = container_config(services, "plateau")
    runtime = dockerfile_stages()[-1]
    _, port = config.metrics.address
    assert instructions(runtime, "EXPOSE") == [str(port)]
    check = instructions(runtime, "HEALTHCHECK")[0]
    assert f"http://127.0.0.1:{port}/healthz" in check and "curl" not in check
    data_dir = str(config.storage.data_dir)
    assert any(
        data_dir in run and re.search(r"(-o plateau|chown plateau)", run)
        for run in instructions(runtime, "RUN")
    ), "the data folder must belong to the plateau user before the volume copies it"


def _compose_check() -> Any:
    spec = importlib.util.spec_from_file_location("compose_check", ROOT / "compose" / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compose_check_counts_the_direct_topic(services: dict[str, dict[str, Any]]) -> None:
    check = _compose_check()
    assert option(services["producer-direct"]["command"], "--topic") == check.DIRECT_TOPIC
    document = {
        "topics": {
            check.DIRECT_TOPIC: {"partitions": {"0": {"records": 5}, "1": {"records": 2}}},
            "other": {"partitions": {"0": {"records": 9}}},
        }
    }
    assert check.landed_in(document, check.DIRECT_TOPIC) == 7
    assert check.landed_in({"topics": {}}, check.DIRECT_TOPIC) == 0


def test_compose_check_counts_what_landed_and_what_was_replicated() -> None:
    check = _compose_check()
    document = {
        "topics": {
            "a": {"partitions": {"0": {"records": 10, "replicated_offset": 4}}},
            "b": {
                "partitions": {
                    "0": {"records": 3, "replicated_offset": 3},
                    "1": {"records": 0, "replicated_offset": 0},
                }
            },
        }
    }
    assert check.landed_and_replicated(document) == (13, 7)


def test_compose_check_says_when_docker_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    check = _compose_check()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(check.CheckError, match="docker is not installed"):
        check.require_docker()
