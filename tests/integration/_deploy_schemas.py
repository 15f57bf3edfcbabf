"""Schemas for deploy/: Kubernetes' own (from kubernetes-validate) and our KubeRay v1 subset.

The KubeRay schema is written here, modelled on KubeRay's v1 CRDs (ray.io_rayclusters.yaml,
ray.io_rayjobs.yaml, ray.io_rayservices.yaml): the fields engage's manifests use, with the
CRDs' types and required fields, plus the fields engage relies on (rayVersion,
rayStartParams, entrypoint, serveConfigV2). Objects are closed (``additionalProperties:
false``): the API server prunes an unknown field of a structural CRD without an error, so a
typo such as ``workerGroupSpec`` would silently vanish. Pod templates and metadata refer to
the official Kubernetes schemas, so one validation covers the whole resource.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from kubernetes_validate.utils import latest_version
from referencing import Registry, Resource

K8S = "https://kubernetes.io/api"
OBJECT_META = f"{K8S}/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
POD_TEMPLATE = f"{K8S}/podtemplatespec/v1"
RESOURCE_REQUIREMENTS = f"{K8S}/_definitions.json#/$defs/io.k8s.api.core.v1.ResourceRequirements"


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_REF_POD_TEMPLATE = {"$ref": POD_TEMPLATE}

_AUTH_OPTIONS = _closed(
    {
        "mode": {"enum": ["disabled", "token"]},
        "secretName": {"type": "string"},
        "enableK8sTokenAuth": {"type": "boolean"},
    }
)

_HEAD_GROUP = _closed(
    {
        "template": _REF_POD_TEMPLATE,
        # Every value a string: `num-cpus: 0` (an integer) is rejected by the API server.
        "rayStartParams": _STRING_MAP,
        "enableIngress": {"type": "boolean"},
        "headService": {"type": "object"},
        "ingressOptions": {"type": "object"},
        "labels": _STRING_MAP,
        "resources": _STRING_MAP,
        "serviceType": {"type": "string"},
    },
    required=("template", "rayStartParams"),
)

_WORKER_GROUP = _closed(
    {
        "groupName": {"type": "string", "minLength": 1},
        "replicas": _INT32,
        "minReplicas": _INT32,
        "maxReplicas": _INT32,
        "numOfHosts": _INT32,
        "idleTimeoutSeconds": _INT32,
        "priority": _INT32,
        "suspend": {"type": "boolean"},
        "rayStartParams": _STRING_MAP,
        "labels": _STRING_MAP,
        "resources": _STRING_MAP,
        "scaleStrategy": _closed(
            {"workersToDelete": {"type": "array", "items": {"type": "string"}}}
        ),
        "template": _REF_POD_TEMPLATE,
    },
    required=("groupName", "minReplicas", "maxReplicas", "rayStartParams", "template"),
)

RAY_CLUSTER_SPEC = _closed(
    {
        "rayVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "authOptions": _AUTH_OPTIONS,
        "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": {"type": "object"},
        "gcsFaultToleranceOptions": {"type": "object"},
        "headServiceAnnotations": _STRING_MAP,
        "managedBy": {"type": "string"},
        "suspend": {"type": "boolean"},
        "upgradeStrategy": {"type": "object"},
        "networkPolicy": {"type": "object"},
        "tlsOptions": {"type": "object"},
        "historyServerOptions": {"type": "object"},
        "headGroupSpec": _HEAD_GROUP,
        "workerGroupSpecs": {"type": "array", "items": _WORKER_GROUP},
    },
    required=("rayVersion", "headGroupSpec"),
)

RAY_JOB_SPEC = _closed(
    {
        "entrypoint": {"type": "string", "minLength": 1},
        # A YAML document in a string (Ray's runtime_env); the test parses it.
        "runtimeEnvYAML": {"type": "string"},
        "shutdownAfterJobFinishes": {"type": "boolean"},
        "ttlSecondsAfterFinished": _INT32,
        "activeDeadlineSeconds": _INT32,
        "preRunningDeadlineSeconds": {**_INT32, "minimum": 1},
        "backoffLimit": _INT32,
        "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
        "submitterPodTemplate": _REF_POD_TEMPLATE,
        "submitterConfig": _closed({"backoffLimit": _INT32}),
        "rayClusterSpec": RAY_CLUSTER_SPEC,
        "clusterSelector": _STRING_MAP,
        "metadata": _STRING_MAP,
        "jobId": {"type": "string"},
        "entrypointResources": {"type": "string"},
        "entrypointNumCpus": {"type": "number"},
        "entrypointNumGpus": {"type": "number"},
        "deletionStrategy": {"type": "object"},
        "managedBy": {"type": "string"},
        "suspend": {"type": "boolean"},
    },
    required=("entrypoint", "shutdownAfterJobFinishes", "rayClusterSpec"),
)

RAY_SERVICE_SPEC = _closed(
    {
        # A YAML document in a string (Ray Serve's config); SERVE_CONFIG checks it.
        "serveConfigV2": {"type": "string", "minLength": 1},
        "rayClusterConfig": RAY_CLUSTER_SPEC,
        "serviceUnhealthySecondThreshold": _INT32,
        "deploymentUnhealthySecondThreshold": _INT32,
        "rayClusterDeletionDelaySeconds": {**_INT32, "minimum": 0},
        "serveService": {"type": "object"},
        "upgradeStrategy": {"type": "object"},
        "excludeHeadPodFromServeSvc": {"type": "boolean"},
        "managedBy": {"type": "string"},
        "suspend": {"type": "boolean"},
    },
    required=("serveConfigV2", "rayClusterConfig"),
)


def _resource(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"allOf": [{"$ref": OBJECT_META}, {"required": ["name"]}]}
    return _closed(
        {
            "apiVersion": {"const": "ray.io/v1"},
            "kind": {"const": kind},
            "metadata": metadata,
            "spec": spec,
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    )


KUBERAY = {
    "RayCluster": _resource("RayCluster", RAY_CLUSTER_SPEC),
    "RayJob": _resource("RayJob", RAY_JOB_SPEC),
    "RayService": _resource("RayService", RAY_SERVICE_SPEC),
}

# serveConfigV2, the fields engage's RayService relies on (Ray Serve's ServeDeploySchema).
_DEPLOYMENT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "num_replicas": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
        "max_ongoing_requests": {"type": "integer", "minimum": 1},
        "ray_actor_options": {"type": "object"},
    },
    "required": ["name"],
}
SERVE_CONFIG = {
    "type": "object",
    "properties": {
        "proxy_location": {"enum": ["Disabled", "HeadOnly", "EveryNode"]},
        "http_options": {"type": "object"},
        "applications": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "route_prefix": {"type": "string", "pattern": "^/"},
                    "import_path": {
                        "type": "string",
                        "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
                    },
                    "args": {"type": "object"},
                    "runtime_env": {"type": "object"},
                    "deployments": {"type": "array", "minItems": 1, "items": _DEPLOYMENT},
                },
                "required": ["name", "route_prefix", "import_path", "deployments"],
            },
        },
    },
    "required": ["applications"],
}


@cache
def _k8s_dir() -> Any:
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    return root / f"v{latest_version()}-local-strict"


@cache
def _k8s_registry() -> Registry:
    """Every official Kubernetes schema we reference, by its ``$id``."""
    names = ("_definitions", "podtemplatespec-v1", "configmap-v1", "secret-v1", "service-v1")
    docs = [json.loads((_k8s_dir() / f"{name}.json").read_text()) for name in names]
    return Registry().with_resources((doc["$id"], Resource.from_contents(doc)) for doc in docs)


def kubernetes_version() -> str:
    """The Kubernetes version whose schemas we validate against (kubernetes-validate's latest)."""
    return latest_version()


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for ``schema`` that resolves the official Kubernetes schemas it refers to."""
    return Draft202012Validator(schema, registry=_k8s_registry())


def k8s_validator(kind: str) -> Draft202012Validator:
    """A validator for a core/v1 kind (``ConfigMap``, ``Secret``, ``Service``) or ``PodTemplateSpec``."""
    return validator({"$ref": f"{K8S}/{kind.lower()}/v1"})


def errors(validator_: Draft202012Validator, document: Any) -> list[str]:
    """Every schema violation in ``document``, each with its JSON path."""
    return [
        f"{e.json_path}: {e.message[:300]}"
        for e in sorted(validator_.iter_errors(document), key=lambda e: e.json_path)
    ]
