"""deploy/k8s: valid against the Kubernetes schemas (offline, kubernetes-validate) and coherent.

No cluster runs here (no OCI runtime works on these machines): the manifests are validated,
not applied. Besides the schemas, the checks are what a schema cannot see and an operator would
hit at ``kubectl apply`` or the first rollout: every file applied, selectors that match, probes
on routes the service has, the grace period over the service's own shutdown grace, and every
setting name one the service reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import make_settings

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
# Kubernetes versions the manifests must validate against: the oldest still supported by the
# major clouds here and the newest kubernetes-validate knows.
VERSIONS = ("1.33.0", kubernetes_validate.latest_version())


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _manifests() -> dict[str, dict[str, Any]]:
    """``kind/name`` -> resource, over every manifest file (not the kustomization)."""
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in _docs(path.name):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "path", sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"), ids=str
)
def test_every_manifest_validates_against_the_kubernetes_schema(path: str, version: str) -> None:
    for doc in _docs(path):
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any error


def test_the_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    kustomization = _docs("kustomization.yaml")[0]
    listed = set(kustomization["resources"])
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files - {"secret.example.yaml"}


def test_selectors_targets_and_references_hold_together() -> None:
    res = _manifests()
    deployment = res["Deployment/agentstation"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert res["Service/agentstation"]["spec"]["selector"] == selector
    assert res["PodDisruptionBudget/agentstation"]["spec"]["selector"]["matchLabels"] == selector
    target = res["HorizontalPodAutoscaler/agentstation"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "agentstation")
    # A PDB that allows no disruption would block every node drain.
    hpa = res["HorizontalPodAutoscaler/agentstation"]["spec"]
    assert hpa["minReplicas"] > res["PodDisruptionBudget/agentstation"]["spec"]["maxUnavailable"]
    # Every ConfigMap, Secret and ServiceAccount the pods use is defined.
    for spec in (pod["spec"], res["Job/agentstation-migrate"]["spec"]["template"]["spec"]):
        assert f"ServiceAccount/{spec['serviceAccountName']}" in res
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                kind = "ConfigMap" if "configMapRef" in source else "Secret"
                ref = source.get("configMapRef") or source["secretRef"]
                assert f"{kind}/{ref['name']}" in res
    port = pod["spec"]["containers"][0]["ports"][0]
    config = res["ConfigMap/agentstation-config"]["data"]
    assert str(port["containerPort"]) == config["AGENTSTATION_PORT"]
    assert res["Service/agentstation"]["spec"]["ports"][0]["targetPort"] == port["name"]


def test_probes_hit_routes_the_service_answers_and_grace_outlasts_shutdown(
    tmp_path: Path,
) -> None:
    pod = _manifests()["Deployment/agentstation"]["spec"]["template"]["spec"]
    gateway = pod["containers"][0]
    paths = {
        gateway[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path / 'k.db'}"))
    routes = {getattr(r, "path", None) for r in app.routes}
    assert paths == {"/healthz", "/readyz"} and paths <= routes
    config = _manifests()["ConfigMap/agentstation-config"]["data"]
    grace = float(config["AGENTSTATION_SHUTDOWN_GRACE_S"])
    pre_stop = float(gateway["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > 2 * grace + pre_stop


def test_the_config_names_only_settings_the_service_reads() -> None:
    config = _manifests()["ConfigMap/agentstation-config"]["data"]
    env = {k: v for k, v in config.items() if k.startswith("AGENTSTATION_")}
    known = {f"AGENTSTATION_{name.upper()}" for name in Settings.model_fields}
    sandbox = {"AGENTSTATION_SANDBOX_BASE_DIR", "AGENTSTATION_SANDBOX_MIN_LEVEL"}
    assert set(env) - sandbox <= known
    gateway = _manifests()["Deployment/agentstation"]["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"] for e in gateway["env"]} <= known
    # The pod name (<deployment>-<10-char hash>-<5 chars>) is the replica's name: it must fit.
    limit = Settings.model_fields["replica_name"].metadata[0].max_length
    assert len("agentstation") + 17 <= limit
    # The values parse as the service would parse them (models file aside: mounted at run time).
    models = yaml.safe_load(config["models.yaml"])["models"]
    settings = Settings.model_validate(
        {k.removeprefix("AGENTSTATION_").lower(): v for k, v in env.items()} | {"models": models}
    )
    assert settings.rate_limit and settings.models[0].backend == "openai"
    secret = _manifests()["Secret/agentstation-secrets"]["stringData"]
    assert {"AGENTSTATION_DATABASE_URL", "AGENTSTATION_API_KEYS"} <= set(secret)


def test_the_sandbox_gets_what_bubblewrap_needs() -> None:
    pod = _manifests()["Deployment/agentstation"]["spec"]["template"]["spec"]
    gateway = pod["containers"][0]["securityContext"]
    # docs/sandbox.md: unshare/mount/pivot_root (seccomp), no AppArmor confinement, an unmasked
    # /proc (allowed only with the pod's own user namespace), root to start kernels per uid.
    assert pod["securityContext"]["seccompProfile"]["type"] in {"Unconfined", "Localhost"}
    assert pod["securityContext"]["appArmorProfile"]["type"] == "Unconfined"
    assert gateway["procMount"] == "Unmasked" and pod["hostUsers"] is False
    assert gateway["runAsUser"] == 0 and "privileged" not in gateway
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/var/lib/agentstation", "/tmp", "/run/agentstation"} <= mounts
