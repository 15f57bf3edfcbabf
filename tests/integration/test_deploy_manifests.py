"""What deploy/ ships, checked without a cluster or a Docker daemon.

- KubeRay resources against our KubeRay v1 schema (tests/integration/_deploy_schemas.py),
  whose pod templates and metadata are the official Kubernetes schemas; ConfigMaps, Secrets and
  Services against the official schemas alone (kubernetes-validate's strict set).
- serveConfigV2 against our schema and Ray Serve's own ServeDeploySchema.
- The compose file against the compose-spec schema (check-jsonschema's vendored copy), its
  Prometheus config with promtool, the Grafana dashboard's PromQL against JobMetrics' names.
- The Dockerfile at lint level (no hadolint here): pinned bases, constraints, non-root user.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from _deploy_schemas import (
    KUBERAY,
    SERVE_CONFIG,
    errors,
    k8s_validator,
    kubernetes_version,
    validator,
)
from prometheus_client import CollectorRegistry

from engage.monitor.metrics import JobMetrics
from engage.spec import parse_spec
from engage.tracking.run import model_requirements

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERAY_DIR = DEPLOY / "kuberay"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
DASHBOARD = DEPLOY / "grafana" / "engage-dashboard.json"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed; `make test` installs it (Debian package prometheus)",
)


def _pinned(image: str) -> bool:
    """A tag that names a version (``name:1.2...`` or ``name:RELEASE...``), never latest."""
    return re.search(r":(v?\d[\w.-]*|RELEASE\.[\w.-]+)$", image) is not None


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(KUBERAY_DIR.glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


DOCS = _documents()
CRS = [(name, d) for name, d in DOCS if d["apiVersion"] == "ray.io/v1"]
CORE = [(name, d) for name, d in DOCS if d["apiVersion"] == "v1"]


def _one(kind: str) -> dict[str, Any]:
    (doc,) = [d for _, d in CRS if d["kind"] == kind]
    return doc


def _cluster_specs(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    spec = doc["spec"]
    for key in ("rayClusterSpec", "rayClusterConfig"):
        if key in spec:
            yield f"spec.{key}", spec[key]
    if doc["kind"] == "RayCluster":
        yield "spec", spec


def _pod_templates(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every PodTemplateSpec in a KubeRay resource, with its path."""
    for where, cluster in _cluster_specs(doc):
        yield f"{where}.headGroupSpec.template", cluster["headGroupSpec"]["template"]
        for i, group in enumerate(cluster.get("workerGroupSpecs", [])):
            yield f"{where}.workerGroupSpecs[{i}].template", group["template"]
    if "submitterPodTemplate" in doc["spec"]:
        yield "spec.submitterPodTemplate", doc["spec"]["submitterPodTemplate"]


TEMPLATES = [
    pytest.param(t, id=f"{name}:{path}") for name, d in CRS for path, t in _pod_templates(d)
]


# -- Kubernetes and KubeRay schemas ------------------------------------------------------------
def test_deploy_ships_the_three_kuberay_resources_and_their_config() -> None:
    kinds = sorted(d["kind"] for _, d in DOCS)

    assert kinds == [
        "ConfigMap", "ConfigMap", "RayCluster", "RayJob", "RayService", "Secret", "Service"
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "doc"), CRS, ids=[d["kind"] for _, d in CRS])
def test_kuberay_resources_match_the_kuberay_v1_schema(name: str, doc: dict[str, Any]) -> None:
    problems = errors(validator(KUBERAY[doc["kind"]]), doc)

    assert not problems, f"{name} (Kubernetes {kubernetes_version()} schemas):\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(("name", "doc"), CORE, ids=[f"{d['kind']}:{n}" for n, d in CORE])
def test_core_objects_match_the_official_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    problems = errors(k8s_validator(doc["kind"]), doc)

    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_pod_template_is_a_valid_kubernetes_pod_template(template: dict[str, Any]) -> None:
    assert not errors(k8s_validator("PodTemplateSpec"), template)


def test_the_kuberay_schema_rejects_what_the_api_server_would_drop_or_refuse() -> None:
    doc = yaml.safe_load((KUBERAY_DIR / "raycluster.yaml").read_text())
    doc["spec"]["workerGroupSpec"] = []  # a typo the API server would prune silently
    doc["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # must be a string
    doc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resource"] = {}

    problems = "\n".join(errors(validator(KUBERAY["RayCluster"]), doc))

    assert "'workerGroupSpec' was unexpected" in problems
    assert "rayStartParams['num-cpus']: 0 is not of type 'string'" in problems
    assert "'resource' was unexpected" in problems


# -- what the schemas cannot say ---------------------------------------------------------------
def _containers() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for name, doc in CRS:
        for path, template in _pod_templates(doc):
            for c in template["spec"]["containers"]:
                yield f"{name}:{path}:{c['name']}", template["spec"], c


@pytest.mark.parametrize(
    ("where", "pod", "container"), list(_containers()), ids=[w for w, _, _ in _containers()]
)
def test_every_container_is_unprivileged_pinned_and_bounded(
    where: str, pod: dict[str, Any], container: dict[str, Any]
) -> None:
    security = container.get("securityContext", {})
    image = container["image"]

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert security.get("privileged", False) is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert _pinned(image), image
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])


def test_every_cluster_runs_the_ray_version_engage_pins_with_sane_replica_bounds() -> None:
    for name, doc in CRS:
        for where, cluster in _cluster_specs(doc):
            assert cluster["rayVersion"] == ray.__version__, f"{name}:{where}"
            for group in cluster.get("workerGroupSpecs", []):
                bounds = group["minReplicas"], group.get("replicas", 0), group["maxReplicas"]
                assert bounds[0] <= bounds[1] <= bounds[2], f"{name}:{where}: {bounds}"


def test_every_configmap_and_secret_the_pods_use_is_shipped() -> None:
    shipped = {(d["kind"], d["metadata"]["name"]) for _, d in CORE}
    used = set()
    for _, doc in CRS:
        for _, template in _pod_templates(doc):
            for volume in template["spec"].get("volumes", []):
                if "configMap" in volume:
                    used.add(("ConfigMap", volume["configMap"]["name"]))
            for c in template["spec"]["containers"]:
                used |= {("ConfigMap", e["configMapRef"]["name"]) for e in c.get("envFrom", [])}
                for env in c.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        used.add(("Secret", ref["name"]))

    assert used <= shipped, used - shipped


def test_the_pipeline_configmap_is_the_quickstart_spec() -> None:
    (configmap,) = [d for name, d in CORE if name == "pipeline-configmap.yaml"]

    assert (
        configmap["data"]["pipeline.yaml"] == (REPO / "pipelines" / "quickstart.yaml").read_text()
    )


def test_the_rayjob_runs_the_mounted_spec_with_valid_overrides() -> None:
    job = _one("RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in head["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in head["volumes"]}
    (configmap,) = [d for name, d in CORE if name == "pipeline-configmap.yaml"]

    assert argv[:3] == ["engage", "run", "/config/pipeline.yaml"]
    assert argv[argv.index("--address") + 1] == "auto"
    (volume,) = [
        n for n, v in volumes.items() if v.get("configMap", {}).get("name") == "engage-pipeline"
    ]
    assert mounts[volume] == "/config"
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    spec = parse_spec(configmap["data"]["pipeline.yaml"], overrides=sets).spec
    assert (spec.monitor.host, spec.monitor.port) == ("0.0.0.0", 9470)
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert "working_dir" not in runtime_env  # workers import engage from the image
    assert all(isinstance(v, str) for v in runtime_env["env_vars"].values())


def test_the_rayservice_serve_config_parses_and_names_engages_serve_app() -> None:
    from ray.serve.schema import ServeDeploySchema

    service = _one("RayService")
    config = yaml.safe_load(service["spec"]["serveConfigV2"])

    assert not errors(validator(SERVE_CONFIG), config)
    ServeDeploySchema.model_validate(config)  # Ray Serve's own schema
    (app,) = config["applications"]
    assert app["import_path"] == "engage.serve.build:build_app"
    assert app["args"]["tracking_uri_env"] == "MLFLOW_TRACKING_URI"
    cluster = service["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:  # the Serve controller and replicas all read the token
        env = {e["name"]: e for e in group["template"]["spec"]["containers"][0]["env"]}
        assert env[app["args"]["token_env"]]["valueFrom"]["secretKeyRef"]["name"]


def _register(uri: str, name: str, alias: str, window: int = 30, features: int = 5) -> None:
    """One registered version of a tiny torch classifier with a tensor signature."""
    import mlflow.pytorch
    import numpy as np
    import torch
    from mlflow.models import infer_signature

    from engage.tracking.store import ensure_experiment, open_client

    client = open_client(uri)
    experiment = ensure_experiment(client, "rayservice-test")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(window * features, 2))
    x = np.zeros((2, window, features), dtype=np.float32)
    y = model(torch.from_numpy(x)).detach().numpy()
    run = client.create_run(experiment)
    local = Path(uri.removeprefix("sqlite:///")).parent / "model"
    mlflow.pytorch.save_model(
        model,
        local,
        signature=infer_signature(x, y),
        input_example=x,
        pip_requirements=model_requirements(),  # MLflow infers them in a subprocess otherwise
    )
    client.log_artifacts(run.info.run_id, str(local), "model")
    client.create_registered_model(name)
    client.create_model_version(name, f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    client.set_registered_model_alias(name, alias, "1")


@pytest.fixture
def serve_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The RayService's application, with the registry and the environment its args name."""
    config = yaml.safe_load(_one("RayService")["spec"]["serveConfigV2"])
    (app,) = config["applications"]
    name, alias = app["args"]["model"].split("@")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _register(uri, name, alias)
    monkeypatch.setenv(app["args"]["tracking_uri_env"], uri)
    monkeypatch.setenv("ENGAGE_HOME", str(tmp_path / ".engage"))
    monkeypatch.delenv(app["args"]["token_env"], raising=False)
    return app


def test_the_serve_import_path_builds_the_app_engage_deploy_runs(serve_app, monkeypatch) -> None:
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve._private.build_app import build_app

    from engage.serve.auth import digest

    token = "a-real-token-0123456789abcdef"
    monkeypatch.setenv(serve_app["args"]["token_env"], token)
    module_name, attr = serve_app["import_path"].split(":")
    builder = getattr(importlib.import_module(module_name), attr)

    # What Serve's controller does with import_path and args, then its own build step.
    application = call_user_app_builder_with_args_if_necessary(builder, serve_app["args"])
    built = build_app(application, name=serve_app["name"])

    names = {d.name for d in built.deployments}
    assert names == {d["name"] for d in serve_app["deployments"]} == {built.ingress_deployment_name}
    (deployment,) = built.deployments
    (settings,) = deployment.init_args
    assert settings.token_digest == digest(token)  # the token itself is not in the config
    assert settings.max_batch_size == serve_app["args"]["max_batch_size"]
    (route,) = settings.routes  # resolved once, at build time: every replica serves it
    assert (route.target.name, route.target.version, route.weight) == (
        "smart-home-occupancy", "1", 1.0,
    )  # fmt: skip
    assert route.target.input_spec.window == 30
    assert settings.hooks.app == "smart-home-occupancy"
    assert settings.hooks.tracking_uri == os.environ[serve_app["args"]["tracking_uri_env"]]


def test_the_serve_app_refuses_to_build_without_its_token(serve_app) -> None:
    from engage.errors import EngageError

    module_name, attr = serve_app["import_path"].split(":")
    builder = getattr(importlib.import_module(module_name), attr)

    with pytest.raises(EngageError, match="without a bearer token"):
        builder(serve_app["args"])


def test_the_placeholder_serve_token_is_one_the_serve_app_refuses() -> None:
    (secret,) = [d for _, d in CORE if d["kind"] == "Secret"]

    assert len(secret["stringData"]["token"]) < 16  # engage.serve.auth requires 16 or more


# -- compose -----------------------------------------------------------------------------------
COMPOSE_DOC = yaml.safe_load(COMPOSE.read_text())
SERVICES = COMPOSE_DOC["services"]
ONE_SHOT = {"minio-init"}


def test_the_compose_file_matches_the_compose_spec() -> None:
    tool = Path(sys.executable).with_name("check-jsonschema")

    done = subprocess.run(
        [str(tool), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_publishes_ports_on_loopback_only() -> None:
    published = [p for s in SERVICES.values() for p in s.get("ports", [])]

    assert published
    assert all(isinstance(p, str) and p.startswith("127.0.0.1:") for p in published), published


def test_compose_services_are_healthchecked_and_start_in_order() -> None:
    for name, service in SERVICES.items():
        image = service["image"]
        assert _pinned(image), f"{name}: {image}"
        assert name in ONE_SHOT or "healthcheck" in service, name
        for dependency, condition in service.get("depends_on", {}).items():
            expected = (
                "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            )
            assert condition == {"condition": expected}, f"{name} -> {dependency}"


def test_compose_runs_mlflow_on_postgres_and_minio_and_the_dashboard_from_the_engage_image() -> (
    None
):
    mlflow, dashboard = SERVICES["mlflow"], SERVICES["dashboard"]
    command = mlflow["command"]

    assert command[command.index("--backend-store-uri") + 1].startswith(
        "postgresql+psycopg2://mlflow:${POSTGRES_PASSWORD}@postgres:5432/"
    )
    assert command[command.index("--artifacts-destination") + 1] == "s3://mlflow/"
    assert mlflow["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert SERVICES["postgres"]["image"].startswith("postgres:15")
    for service in (mlflow, dashboard):
        assert service["build"]["dockerfile"] == "deploy/docker/Dockerfile"
        assert (COMPOSE.parent / service["build"]["context"]).resolve() == REPO
    assert dashboard["command"][:2] == ["run", "dashboard/app.py"]
    assert dashboard["entrypoint"] == ["python", "-m", "streamlit"]


def test_compose_mounts_files_that_exist() -> None:
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")) and "ENGAGE_HOME" not in volume:
                assert (COMPOSE.parent / source).exists(), f"{name}: {volume}"


@needs_promtool
def test_the_compose_prometheus_config_is_valid_and_loads_the_rules(tmp_path: Path) -> None:
    # The layout the prometheus service mounts: config, rules.yml next to it, targets/.
    shutil.copy(COMPOSE.parent / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(DEPLOY / "prometheus" / "rules.yml", tmp_path / "rules.yml")
    (tmp_path / "targets").mkdir()
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    count = sum(len(g["rules"]) for g in rules["groups"])

    done = subprocess.run(
        ["promtool", "check", "config", "prometheus.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {count} rules found" in done.stdout


def test_the_compose_scrape_job_keeps_the_shipped_job_labels() -> None:
    ours = yaml.safe_load((COMPOSE.parent / "prometheus.yml").read_text())
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    engage = {j["job_name"]: j for j in ours["scrape_configs"]}["engage"]
    reference = {j["job_name"]: j for j in shipped["scrape_configs"]}["engage"]
    mounts = SERVICES["prometheus"]["volumes"]

    assert ours["rule_files"] == shipped["rule_files"] == ["rules.yml"]
    assert engage["honor_labels"] is reference["honor_labels"] is True
    assert engage["file_sd_configs"][0]["files"] == ["targets/*.json"]
    assert "../prometheus/rules.yml:/etc/prometheus/rules.yml:ro" in mounts
    assert any(m.endswith("/prometheus/targets:/etc/prometheus/targets:ro") for m in mounts)


# -- Grafana dashboard -------------------------------------------------------------------------
DASH = json.loads(DASHBOARD.read_text())
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "rate", "irate", "increase", "histogram_quantile",
    "time", "min_over_time", "max_over_time", "avg_over_time", "label_values", "offset",
}  # fmt: skip


def _exprs() -> list[str]:
    return [
        t["expr"]
        for p in DASH["panels"]
        for t in p.get("targets", [])
    ]  # fmt: skip


def _job_metric_names() -> set[str]:
    registry = CollectorRegistry()
    JobMetrics(registry, "job", "run")
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    return {f.name + s for f in registry.collect() for s in suffixes[f.type]}


def _metric_names(expr: str) -> set[str]:
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)  # matchers and ranges
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare))
    return words - PROMQL_WORDS - {"le", "job", "run_id", "stage", "split", "metric", "rank"}


def test_the_dashboard_is_templated_by_datasource_job_and_run() -> None:
    variables = {v["name"]: v for v in DASH["templating"]["list"]}

    assert set(variables) == {"datasource", "job", "run_id"}
    assert variables["datasource"]["query"] == "prometheus"
    assert (
        variables["run_id"]["query"]["query"] == 'label_values(engage_stage{job=~"$job"}, run_id)'
    )
    for panel in DASH["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_dashboard_query_uses_only_metrics_jobmetrics_registers() -> None:
    known = _job_metric_names()
    queries = _exprs() + [
        v["query"]["query"] for v in DASH["templating"]["list"] if v["type"] == "query"
    ]

    for expr in queries:
        assert _metric_names(expr) <= known, f"{expr}: {_metric_names(expr) - known}"
        pairs = {"(": ")", "[": "]", "{": "}"}
        stack = []
        for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
            if ch in pairs:
                stack.append(pairs[ch])
            elif ch in pairs.values():
                assert stack, expr
                assert stack.pop() == ch, expr
        assert not stack, expr


def test_every_panel_query_is_filtered_by_job_and_run() -> None:
    for expr in _exprs():
        for matcher in re.findall(r"engage_\w+(\{[^}]*\})?", expr):
            assert matcher == '{job=~"$job", run_id=~"$run_id"}', expr


def test_the_dashboard_covers_engages_key_metrics() -> None:
    used = set().union(*map(_metric_names, _exprs()))
    key = {
        "engage_step_seconds_bucket", "engage_samples_total", "engage_data_stall_ratio",
        "engage_loss", "engage_eval_metric", "engage_epoch", "engage_workers",
        "engage_restarts_total", "engage_worker_cpu_seconds_total",
        "engage_worker_resident_memory_bytes", "engage_gpu_utilization_ratio",
        "engage_gpu_memory_used_bytes", "engage_tracking_spool_depth",
        "engage_tracking_spool_lag_seconds", "engage_alerts_firing",
    }  # fmt: skip

    assert key <= used, key - used


def test_dashboard_panels_have_unique_ids_and_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    ids = [p["id"] for p in DASH["panels"]]
    for panel in DASH["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[x, y]}"
                cells[x, y] = panel["title"]

    assert len(ids) == len(set(ids))


@needs_promtool
def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    # promtool has no PromQL-only check; recording rules go through its real parser.
    def concrete(expr: str) -> str:
        return expr.replace("$__rate_interval", "1m").replace("$job", ".+").replace("$run_id", ".+")

    rules = [
        {"record": f"engage_dashboard:query_{i}", "expr": concrete(e)}
        for i, e in enumerate(_exprs())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))

    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


# -- Dockerfile --------------------------------------------------------------------------------
def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_pins_its_base_and_installs_the_tested_set() -> None:
    steps = _instructions()
    bases = [arg.split()[0] for op, arg in steps if op == "FROM"]
    runs = " ".join(arg for op, arg in steps if op == "RUN")
    pip_installs = re.findall(r"pip install ([^&]*)", runs)

    assert bases == ["python:3.11.13-slim-bookworm"]
    assert all(_pinned(b) for b in bases)
    assert any("-c constraints.txt ." in i for i in pip_installs), pip_installs
    for install in pip_installs:  # everything is pinned, by constraints or by ==
        packages = [w for w in install.split() if not w.startswith("-") and w not in (".",)]
        packages = [p.strip('"') for p in packages if "URL}" not in p and "constraints" not in p]
        assert "-c constraints.txt" in install or all("==" in p for p in packages), install
    assert "download.pytorch.org/whl/cpu" in DOCKERFILE.read_text()
    assert "ARG TORCH_VERSION=2.13.0" in DOCKERFILE.read_text()


def test_the_image_runs_engage_as_a_non_root_user() -> None:
    steps = _instructions()
    users = [arg for op, arg in steps if op == "USER"]

    assert users
    assert users[-1] not in ("root", "0")
    assert ("ENTRYPOINT", '["engage"]') in steps


def test_the_build_context_keeps_the_venv_out_and_lets_the_copied_files_in() -> None:
    ignore = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line]
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [arg.split()[:-1] for op, arg in _instructions() if op == "COPY"]

    assert "*" in ignore  # an allow-list: .venv, .engage and .git never reach the daemon
    for sources in copies:
        for source in sources:
            if source != ".":
                assert source.rstrip("/") in allowed, source
                assert (REPO / source).exists(), source
