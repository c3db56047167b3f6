"""The Helm chart (helm/kafka-sow) and the Dockerfile: lint, render, Kubernetes schemas.

Helm runs in-process (helm-python-sdk binds Helm's Go SDK: no helm binary, no cluster);
kubernetes-validate checks every rendered manifest against the Kubernetes API schemas.
The checks are about what the product needs: the env names it reads, a volume per
processor at its state dir, probes on the endpoints it serves, a topology it can load.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from processor.config import Settings, parse_kafka_properties
from processor.topology.loader import load_topology

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kafka-sow"
#: A recent Kubernetes release kubernetes-validate 1.37.0 has schemas for.
KUBERNETES_VERSION = "1.35.0"
BOOTSTRAP = {"kafka": {"bootstrapServers": "kafka:9092"}}
#: Values sets rendered: the defaults (plus the required bootstrap) and ci/*.yaml.
VALUES_SETS = ["default", *sorted(p.name for p in (CHART / "ci").glob("*.yaml"))]
#: Variables that only carry a Secret into SOW_KAFKA_PROPERTIES as $(NAME).
SECRET_CARRIERS = {"SOW_SASL_USERNAME", "SOW_SASL_PASSWORD"}


def values_of(name: str) -> dict[str, Any]:
    if name == "default":
        return BOOTSTRAP
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / name).read_text())
    return loaded


_rendered: dict[str, list[dict[str, Any]]] = {}


def manifests(name: str) -> list[dict[str, Any]]:
    """The chart rendered with values set ``name``, as Kubernetes objects (cached)."""
    if name not in _rendered:
        chart = helm.Chart.load(CHART)
        files = chart.render(values_of(name), name="sow", namespace="data", is_install=True)
        _rendered[name] = [
            doc
            for path, text in sorted(files.items())
            if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text)
            if doc
        ]
    return _rendered[name]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def containers(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for o in objects:
        if o["kind"] in ("StatefulSet", "Deployment"):
            yield from o["spec"]["template"]["spec"]["containers"]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize("values", VALUES_SETS)
def test_helm_lint_finds_no_errors_or_warnings(values: str) -> None:
    report = helm.lint(CHART, values_of(values), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # 2 warning, 3 error


@pytest.mark.parametrize("values", VALUES_SETS)
def test_rendered_manifests_are_valid_kubernetes(values: str) -> None:
    objects = manifests(values)
    kinds = sorted(o["kind"] for o in objects)
    assert {"ConfigMap", "Deployment", "Service", "StatefulSet"} <= set(kinds)
    for o in objects:
        if o["kind"] == "ServiceMonitor":  # a CRD: not in the Kubernetes schemas
            assert o["apiVersion"] == "monitoring.coreos.com/v1"
            assert o["spec"]["endpoints"][0]["port"] == "metrics"
            continue
        kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("values", VALUES_SETS)
def test_processor_statefulset_keeps_state_per_replica(values: str) -> None:
    objects = manifests(values)
    statefulset = one(objects, "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["process"]
    expected_replicas = values_of(values).get("processor", {}).get("replicas", 1)
    assert statefulset["spec"]["replicas"] == expected_replicas
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    env = env_of(container)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == env["SOW_STATE_DIR"]["value"]
    # each replica its own transactional id: SOW_INSTANCE_ID is the pod's name
    assert env["SOW_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["SOW_GROUP_ID"]["value"] == values_of(values).get("groupId", "sow-processor")
    # static membership from the pod's name; standby stores as asked
    given = values_of(values).get("processor", {})
    assert env["SOW_MEMBERSHIP"]["value"] == given.get("membership", "static")
    assert env["SOW_STANDBY"]["value"] == given.get("standby", "off")
    assert env["SOW_GROUP_PROTOCOL"]["value"] == given.get("groupProtocol", "classic")
    settings = Settings.from_env(
        {k: e["value"] for k, e in env.items() if "value" in e} | {"SOW_INSTANCE_ID": "p-1"}
    )
    assert settings.group_instance_id == f"{settings.group_id}-p-1"
    metrics_port = int(env["SOW_METRICS_ADDRESS"]["value"].rsplit(":", 1)[1])
    assert container["ports"] == [{"name": "metrics", "containerPort": metrics_port}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    headless = [o for o in objects if o["kind"] == "Service" and o["spec"].get("clusterIP")]
    assert [s["metadata"]["name"] for s in headless] == [statefulset["spec"]["serviceName"]]


@pytest.mark.parametrize("values", VALUES_SETS)
def test_query_service_is_ready_over_grpc_health(values: str) -> None:
    objects = manifests(values)
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["query-service"]
    env = env_of(container)
    grpc_port = int(env["SOW_GRPC_ADDRESS"]["value"].rsplit(":", 1)[1])
    assert grpc_port == 50051
    if values_of(values).get("grpc", {}).get("tls", {}).get("enabled"):
        # the kubelet's gRPC probe speaks no TLS: the same readiness over /readyz
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    else:
        assert container["readinessProbe"]["grpc"] == {"port": grpc_port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["state"]
    services = [o for o in objects if o["kind"] == "Service" and "clusterIP" not in o["spec"]]
    (grpc_service,) = services
    assert grpc_service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert {"name": "grpc", "targetPort": "grpc"}.items() <= grpc_service["spec"]["ports"][
        0
    ].items()


@pytest.mark.parametrize("values", VALUES_SETS)
def test_env_names_are_exactly_settings_the_product_reads(values: str) -> None:
    product = set(Settings.ENVIRONMENT.values())
    for container in containers(manifests(values)):
        env = env_of(container)
        carriers = set(env) - product
        assert carriers <= SECRET_CARRIERS, f"env the product does not read: {carriers}"
        properties = env.get("SOW_KAFKA_PROPERTIES", {}).get("value", "")
        for carrier in carriers:  # only ever used inside SOW_KAFKA_PROPERTIES
            assert f"$({carrier})" in properties
            assert "secretKeyRef" in env[carrier]["valueFrom"]
        assert (
            env["KAFKA_BOOTSTRAP_SERVERS"]["value"]
            == values_of(values)["kafka"]["bootstrapServers"]
        )
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert env["SOW_TOPOLOGY"]["value"] == mounts["topology"] + "/topology.yaml"
        settings = Settings.from_env({k: e["value"] for k, e in env.items() if "value" in e})
        assert str(settings.state_dir) == mounts["state"]


@pytest.mark.parametrize("values", VALUES_SETS)
def test_topology_config_map_loads_as_the_product_topology(values: str, tmp_path: Path) -> None:
    (config_map,) = [
        o
        for o in manifests(values)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-topology")
    ]
    (tmp_path / "topology.yaml").write_text(config_map["data"]["topology.yaml"])
    topology = load_topology(tmp_path / "topology.yaml")
    given = values_of(values).get("topology")
    names = [t["name"] for t in given["topics"]] if isinstance(given, dict) else ["ORDERS"]
    assert list(topology.topics) == names


def test_sasl_and_tls_come_from_secrets_into_kafka_properties() -> None:
    objects = manifests("sasl-tls-values.yaml")
    assert "kafka-credentials" not in str([o for o in objects if o["kind"] == "ConfigMap"])
    for container in containers(objects):
        env = env_of(container)
        properties = parse_kafka_properties(env["SOW_KAFKA_PROPERTIES"]["value"])
        assert properties == {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": "/etc/kafka-sow/tls/ca/ca.pem",
            "ssl.certificate.location": "/etc/kafka-sow/tls/client/tls.crt",
            "ssl.key.location": "/etc/kafka-sow/tls/client/tls.key",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "$(SOW_SASL_USERNAME)",
            "sasl.password": "$(SOW_SASL_PASSWORD)",
            "client.rack": "eu-west-1a",
        }
        secret = env["SOW_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert secret == {"name": "kafka-credentials", "key": "password"}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["kafka-ca"] == "/etc/kafka-sow/tls/ca"
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == 2
    assert all(m["metadata"]["labels"]["release"] == "prometheus" for m in monitors)


def test_grpc_tls_and_logon_come_from_secrets_mounted_where_the_settings_point() -> None:
    """The query service's gRPC security settings name files inside the Secrets (and the
    entitlements ConfigMap) mounted for them; processors get none of it; by default
    nothing is set (plaintext, no logon)."""
    objects = manifests("grpc-security-values.yaml")
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {k: e["value"] for k, e in env_of(container).items() if "value" in e}
    settings = Settings.from_env(env)
    assert settings.auth == "certificate,token,password"
    assert settings.grpc_client_certs == "require"
    assert (settings.jwt_audience, settings.jwt_issuer) == (
        "kafka-sow",
        "https://login.example.com",
    )
    assert settings.jwt_key is None
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    expected = {
        "grpc_tls_cert": ("sow-grpc-tls", "tls.crt"),
        "grpc_tls_key": ("sow-grpc-tls", "tls.key"),
        "grpc_tls_client_ca": ("sow-client-ca", "ca.pem"),
        "users_file": ("sow-users", "users"),
        "jwks_file": ("sow-jwks", "jwks.json"),
    }
    for name, (secret, key) in expected.items():
        path = getattr(settings, name)
        assert path.name == key, name
        volume = volumes[mounts[str(path.parent)]]
        assert volume["secret"]["secretName"] == secret, name
    entitlements = volumes[mounts[str(settings.entitlements.parent)]]
    (config_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == entitlements["configMap"]["name"]
    ]
    assert (
        yaml.safe_load(config_map["data"][settings.entitlements.name])
        == (values_of("grpc-security-values.yaml")["grpc"]["entitlements"])
    )
    processor = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    assert not {"SOW_AUTH", "SOW_GRPC_TLS_CERT"} & set(env_of(processor))
    default = one(manifests("default"), "Deployment")["spec"]["template"]["spec"]
    default_env = env_of(default["containers"][0])
    assert not [name for name in default_env if "AUTH" in name or "TLS" in name or "JWT" in name]


def test_scrape_annotations_by_default_and_off_when_asked() -> None:
    for values, expected in (("default", "true"), ("scaled-values.yaml", None)):
        for o in manifests(values):
            if o["kind"] in ("StatefulSet", "Deployment"):
                annotations = o["spec"]["template"]["metadata"]["annotations"]
                assert annotations.get("prometheus.io/scrape") == expected
    annotations = one(manifests("default"), "Deployment")["spec"]["template"]["metadata"]
    assert annotations["annotations"]["prometheus.io/port"] == "9464"
    assert not [o for o in manifests("default") if o["kind"] == "ServiceMonitor"]


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart rendered with ``values``, as Kubernetes objects."""
    files = helm.Chart.load(CHART).render(values, name="sow", namespace="data", is_install=True)
    return [
        doc
        for path, text in sorted(files.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def dashboards(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
    ]


def test_grafana_dashboard_config_map_for_the_sidecar_unless_disabled() -> None:
    """By default a ConfigMap carries dashboards/kafka-sow.json with the label Grafana's
    sidecar watches (grafana_dashboard: "1"); its label, namespace and annotations are
    values; disabled, there is none."""
    (config_map,) = dashboards(manifests("default"))
    assert config_map["metadata"]["name"] == "sow-kafka-sow-dashboard"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["app.kubernetes.io/instance"] == "sow"
    assert "namespace" not in config_map["metadata"]  # the release's
    assert list(config_map["data"]) == ["kafka-sow.json"]
    shipped = json.loads((CHART / "dashboards" / "kafka-sow.json").read_text())
    assert json.loads(config_map["data"]["kafka-sow.json"]) == shipped
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)
    for values in VALUES_SETS:  # every sample values set ships it
        assert len(dashboards(manifests(values))) == 1, values

    custom = render(
        {
            **BOOTSTRAP,
            "grafanaDashboard": {
                "label": {"key": "example.com/dashboard", "value": "kafka"},
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "Kafka"},
            },
        }
    )
    (config_map,) = dashboards(custom)
    assert config_map["metadata"]["labels"]["example.com/dashboard"] == "kafka"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)

    disabled = render({**BOOTSTRAP, "grafanaDashboard": {"enabled": False}})
    assert dashboards(disabled) == []
    assert {"StatefulSet", "Deployment"} <= {o["kind"] for o in disabled}


BAD_VALUES = {
    "no bootstrap servers": (
        "kafka: {}",
        "at '/kafka/bootstrapServers': minLength: got 0, want 1",
    ),
    "zero processors": (
        "kafka: {bootstrapServers: 'kafka:9092'}\nprocessor: {replicas: 0}",
        "at '/processor/replicas': minimum: got 0, want 1",
    ),
    "unknown pull policy": (
        "kafka: {bootstrapServers: 'kafka:9092'}\nimage: {pullPolicy: Sometimes}",
        "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
    ),
    "SASL without a Secret": (
        "kafka: {bootstrapServers: 'kafka:9092', sasl: {enabled: true}}",
        "at '/kafka/sasl/existingSecret': minLength: got 0, want 1",
    ),
    "misspelt value": (
        "kafka: {bootstrapServers: 'kafka:9092'}\nquerySevice: {replicas: 2}",
        "additional properties 'querySevice' not allowed",
    ),
    "port out of range": (
        "kafka: {bootstrapServers: 'kafka:9092'}\nqueryService: {grpcPort: 70000}",
        "at '/queryService/grpcPort': maximum: got 70,000, want 65,535",
    ),
    "unknown standby placement": (
        "kafka: {bootstrapServers: 'kafka:9092'}\nprocessor: {standby: two}",
        "at '/processor/standby': value must be one of 'off', 'all'",
    ),
    "gRPC TLS without its Secret": (
        "kafka: {bootstrapServers: 'kafka:9092'}\ngrpc: {tls: {enabled: true}}",
        "at '/grpc/tls/secret': minLength: got 0, want 1",
    ),
    "client certificates without their CA": (
        "kafka: {bootstrapServers: 'kafka:9092'}\n"
        "grpc: {tls: {enabled: true, secret: t, clientCerts: require}}",
        "at '/grpc/tls/clientCaSecret/name': minLength: got 0, want 1",
    ),
    "token logon without an audience": (
        "kafka: {bootstrapServers: 'kafka:9092'}\n"
        "grpc: {auth: {methods: [token], jwksSecret: {name: jwks}}}",
        "missing property 'audience'",
    ),
    "unknown logon method": (
        "kafka: {bootstrapServers: 'kafka:9092'}\ngrpc: {auth: {methods: [kerberos]}}",
        "at '/grpc/auth/methods/0': value must be one of 'certificate', 'token', 'password'",
    ),
    "bootstrap without a port": (
        "kafka: {bootstrapServers: kafka}",
        "at '/kafka/bootstrapServers': 'kafka' does not match pattern",
    ),
    "dashboard label value not a label value": (
        "kafka: {bootstrapServers: 'kafka:9092'}\n"
        "grafanaDashboard: {label: {key: grafana_dashboard, value: 'yes please'}}",
        "at '/grafanaDashboard/label/value': 'yes please' does not match pattern",
    ),
    "misspelt dashboard value": (
        "kafka: {bootstrapServers: 'kafka:9092'}\ngrafanaDashboard: {enable: false}",
        "additional properties 'enable' not allowed",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_values_schema_refuses_bad_values_naming_the_value(case: str, tmp_path: Path) -> None:
    text, message = BAD_VALUES[case]
    values_file = tmp_path / "values.yaml"
    values_file.write_text(text + "\n")
    values = helm.values_from_yaml(values_file.read_text())
    chart = helm.Chart.load(CHART)
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema(values)
    assert message in str(caught.value)
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.render(values)  # an install refuses it the same way


def test_a_static_assignment_with_more_than_one_processor_is_refused() -> None:
    """Static processors share one transactional id and fence each other (docs/scaling.md):
    more than one replica would be a crash loop, so the chart refuses it."""
    chart = helm.Chart.load(CHART)
    values = {**BOOTSTRAP, "processor": {"assignment": "static", "replicas": 2}}
    with pytest.raises(helm.HelmRenderError, match=r"processor\.replicas must be 1"):
        chart.render(values, name="sow", namespace="data", is_install=True)
    values["processor"]["replicas"] = 1
    statefulset = one(
        [
            doc
            for path, text in chart.render(values, name="sow", namespace="data").items()
            if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text)
            if doc
        ],
        "StatefulSet",
    )
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["SOW_ASSIGNMENT"]["value"] == "static"


def test_dockerfile_copies_files_that_exist() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in dockerfile
    copied = [
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    ]
    assert copied, "the Dockerfile copies nothing"
    ignored = (ROOT / ".dockerignore").read_text().split()
    for source in copied:
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
        assert source.rstrip("/") not in ignored, f".dockerignore drops {source}"
    assert re.search(r"^USER \d+$", dockerfile, re.MULTILINE), "not a non-root user"
    assert 'ENTRYPOINT ["sow"]' in dockerfile
    assert "pip install ." in dockerfile
