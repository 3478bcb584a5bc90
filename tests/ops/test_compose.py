"""The compose file and Dockerfile hold together (no Docker engine runs here: parse and check)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_OPTS = {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def stages() -> dict[str, list[str]]:
    """Dockerfile stage name -> its instruction lines (continuations joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = match.group(2) or match.group(1)
            out[current] = [line]
        elif current:
            out[current].append(line)
    return out


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment must be a mapping"
    return {str(k): str(v) for k, v in env.items()}


def test_postgres_has_a_healthcheck_and_a_persistent_volume(compose: dict[str, Any]) -> None:
    pg = compose["services"]["postgres"]
    assert pg["image"].startswith("postgres:")
    test = " ".join(pg["healthcheck"]["test"])
    assert "pg_isready" in test
    assert any(v.startswith("pgdata:") for v in pg["volumes"])
    assert "ports" not in pg, "the database must not be published on the host"


@pytest.mark.parametrize("name", ["gateway", "gateway-gpu"])
def test_gateways_wait_for_a_healthy_database_and_migrate_first(
    compose: dict[str, Any], name: str
) -> None:
    services = compose["services"]
    gw = services[name]
    assert gw["depends_on"]["postgres"]["condition"] == "service_healthy"
    command = " ".join(gw["command"])
    if "migrate" in gw["depends_on"]:
        assert gw["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services["migrate"]["command"] == ["agentstation", "migrate"]
        assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    else:
        assert re.search(r"agentstation migrate && exec agentstation serve", command)
    env = env_of(gw)
    assert env["AGENTSTATION_DATABASE_URL"].startswith("postgresql+asyncpg://")
    assert "@postgres:5432/" in env["AGENTSTATION_DATABASE_URL"]
    assert env["AGENTSTATION_HOST"] == "0.0.0.0"
    # Bound to all interfaces inside the container: keys are mandatory (":?" fails fast).
    assert env["AGENTSTATION_API_KEYS"].startswith("${AGENTSTATION_API_KEYS:?")
    assert env["AGENTSTATION_LOG_FORMAT"] == "json"


@pytest.mark.parametrize("name", ["gateway", "gateway-gpu"])
def test_gateways_carry_the_sandbox_settings_and_session_volume(
    compose: dict[str, Any], name: str
) -> None:
    gw = compose["services"][name]
    assert set(gw["security_opt"]) >= SANDBOX_OPTS
    assert gw["pids_limit"] > 0 and gw["mem_limit"]
    assert any(t.startswith("/tmp:size=") for t in gw["tmpfs"])
    assert "sessions:/var/lib/agentstation" in gw["volumes"]
    assert env_of(gw)["AGENTSTATION_SANDBOX_BASE_DIR"].startswith("/var/lib/agentstation/")
    assert "/readyz" in " ".join(gw["healthcheck"]["test"])
    assert gw["stop_grace_period"]


def test_gpu_profile_reserves_nvidia_devices_and_default_stack_stays_cpu(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    gpu = services["gateway-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["build"]["target"] == "gpu"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    for name in ("postgres", "migrate", "gateway"):
        assert "profiles" not in services[name], f"{name} must start without a profile"
    assert services["gateway"]["build"]["target"] == "cpu"
    # Both may run at once: they must not claim the same host port.
    host_ports = [s["ports"][0].rsplit(":", 1)[0] for s in (services["gateway"], gpu)]
    assert host_ports[0] != host_ports[1]
    assert set(compose["volumes"]) >= {"pgdata", "sessions", "hf-cache"}


def test_named_volumes_used_by_services_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared


def test_dockerfile_has_cpu_and_gpu_targets_on_the_right_bases(
    stages: dict[str, list[str]],
) -> None:
    assert {"builder", "cpu", "gpu"} <= stages.keys()
    assert "${VLLM_IMAGE}" in stages["gpu"][0]
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG VLLM_IMAGE=vllm/vllm-openai:v[\d.]+$", text, re.MULTILINE)
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-", text, re.MULTILINE)
    # `docker build .` without --target builds the last stage: it must be the CPU image.
    assert list(stages)[-1] == "default" and stages["default"][0].startswith("FROM cpu")
    for target in ("cpu", "gpu"):
        body = " ".join(stages[target])
        assert "bubblewrap" in body, f"{target}: the sandbox needs bwrap"
        assert "HEALTHCHECK" in body and "/healthz" in body
        assert "EXPOSE 8000" in body
        assert 'ENTRYPOINT ["tini", "--"]' in body
        assert "agentstation serve" in body
        assert "AGENTSTATION_SANDBOX_KERNEL_ENV=/opt/agentstation/kernel-env" in body


def test_dockerfile_copies_only_paths_that_exist(stages: dict[str, list[str]]) -> None:
    for stage, lines in stages.items():
        for line in lines:
            if not line.startswith("COPY") or "--from=" in line:
                continue
            *sources, _dest = line.split()[1:]
            for source in sources:
                assert (ROOT / source).exists(), f"{stage}: COPY {source} does not exist"


def test_dockerignore_keeps_the_venv_and_git_out_of_the_context() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "*.db"} <= set(ignored)


def known_settings() -> set[str]:
    from dataclasses import fields

    from agents.sandbox.config import ENV_PREFIX, SandboxConfig
    from app.settings import Settings

    names = {"AGENTSTATION_" + name.upper() for name in Settings.model_fields}
    names |= {ENV_PREFIX + f.name.upper() for f in fields(SandboxConfig)}
    return names


def test_every_agentstation_variable_set_in_the_images_is_a_real_setting(
    compose: dict[str, Any],
) -> None:
    known = known_settings()
    used: set[str] = set()
    for service in compose["services"].values():
        used |= {k for k in env_of(service) if k.startswith("AGENTSTATION_")}
    dockerfile = (ROOT / "Dockerfile").read_text()
    used |= set(re.findall(r"\b(AGENTSTATION_[A-Z_]+)=", dockerfile))
    # Variables only the compose file itself reads (ports, bind address, memory cap).
    compose_only = {"AGENTSTATION_HOST_PORT", "AGENTSTATION_GPU_HOST_PORT", "AGENTSTATION_BIND"}
    assert used - compose_only <= known, sorted(used - compose_only - known)
    assert {"AGENTSTATION_RATE_LIMIT", "AGENTSTATION_DATABASE_URL"} <= used
