#!/usr/bin/env python3
"""Renders deploy/kubernetes/overlays/* with `kubectl kustomize` and checks what the objects must
agree on, so the manifests cannot rot (issue 60):

- every object's kind and apiVersion (the InferencePool on the GA API, inference.networking.k8s.io/v1);
- the pool selects the model-server pods (its matchLabels are the Deployment's pod labels) and not
  the picker's, its targetPorts are lfm's container port, its endpointPickerRef names the picker's
  Service and one of its ports, which reaches the picker's --grpc-port;
- the HTTPRoute's backendRef names the pool (group, kind, name, a port of the pool);
- the picker's flags name the pool and metrics lfm exports (src/server/server.cpp), its config file
  is a key of a mounted ConfigMap, and the EndpointPickerConfig's profiles refer to its plugins;
- lfm's probes call /health (liveness) and /ready (readiness), routes the server has; the grace
  period covers --drain-delay plus --shutdown-grace; no lfm option is given twice;
- the gpu overlays ask for nvidia.com/gpu and --device=cuda, the cpu one does not;
- the precise-prefix overlay's scorer agrees with lfm's KV block size, events port and pod labels.

Then it breaks a rendered overlay in several ways and requires each break to be reported (a check
that cannot fail proves nothing). Exit 0: all good; 1: problems (listed); 77: no kubectl (skipped).

Usage: k8s_manifests_check.py SOURCE_DIR [--kubectl PATH]   (or LFM_KUBECTL=PATH)
"""
import copy
import os
import re
import shutil
import subprocess
import sys

import yaml

API_VERSIONS = {
    "PersistentVolumeClaim": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "ConfigMap": "v1",
    "Deployment": "apps/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "InferencePool": "inference.networking.k8s.io/v1",
    "HTTPRoute": "gateway.networking.k8s.io/v1",
}
OVERLAYS = {"cpu": {"gpu": False, "precise": False},
            "gpu": {"gpu": True, "precise": False},
            "gpu-precise-prefix": {"gpu": True, "precise": True}}
METRIC_FLAGS = ("--total-queued-requests-metric", "--total-running-requests-metric",
                "--kv-cache-usage-percentage-metric", "--cache-info-metric")


def render(kubectl, path):
    r = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed ({r.returncode}): {r.stderr.strip()}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def flag(args, name):
    """The value of --name=VALUE (or --name VALUE) in an argument list; None when absent."""
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a[len(name) + 1:]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def selects(match_labels, labels):
    return bool(match_labels) and all(labels.get(k) == v for k, v in match_labels.items())


def container_port(container, ref):
    """A container port by number or name."""
    for p in container.get("ports", []):
        if ref in (p.get("containerPort"), p.get("name")):
            return p.get("containerPort")
    return None


def exported_metrics(source):
    """The metric names lfm serve exports: the quoted lfm:* / vllm:* names of src/server/server.cpp."""
    text = open(os.path.join(source, "src/server/server.cpp"), encoding="utf-8").read()
    return set(re.findall(r'"((?:lfm|vllm):[a-z_]+)"', text))


def server_routes(source):
    text = open(os.path.join(source, "src/server/server.cpp"), encoding="utf-8").read()
    return set(re.findall(r'http\.Get\("(/[a-z]+)"', text))


def check(objs, overlay, metrics, routes):
    """Problems of one rendered overlay, as sentences (empty: none)."""
    errs = []
    by = {}
    for o in objs:
        kind, name = o.get("kind"), o.get("metadata", {}).get("name")
        if kind not in API_VERSIONS:
            errs.append(f"unexpected kind {kind} ({name})")
        elif o.get("apiVersion") != API_VERSIONS[kind]:
            errs.append(f"{kind} {name}: apiVersion {o.get('apiVersion')}, expected {API_VERSIONS[kind]}")
        by.setdefault(kind, {})[name] = o
    namespaces = {o.get("metadata", {}).get("namespace") for o in objs}
    if len(namespaces) != 1 or None in namespaces:
        errs.append(f"objects are not all in one namespace: {sorted(map(str, namespaces))}")
    ns = next(iter(namespaces))

    def one(kind, name):
        o = by.get(kind, {}).get(name)
        if o is None:
            errs.append(f"no {kind} named {name}")
        return o

    pools = list(by.get("InferencePool", {}).values())
    if len(pools) != 1:
        errs.append(f"{len(pools)} InferencePools, expected 1")
        return errs
    pool = pools[0]
    spec = pool.get("spec", {})
    lfm = one("Deployment", "lfm")
    epp = one("Deployment", "lfm-epp")
    if lfm is None or epp is None:
        return errs
    pod = lfm["spec"]["template"]
    pod_labels = pod["metadata"].get("labels", {})
    sel = spec.get("selector", {}).get("matchLabels", {})
    if not selects(sel, pod_labels):
        errs.append(f"the pool's selector {sel} does not select lfm's pods {pod_labels}")
    if selects(sel, epp["spec"]["template"]["metadata"].get("labels", {})):
        errs.append("the pool's selector also selects the picker's pods")
    if not selects(lfm["spec"]["selector"].get("matchLabels", {}), pod_labels):
        errs.append("lfm's Deployment selector does not match its pod labels")
    server = next((c for c in pod["spec"]["containers"] if c["name"] == "lfm"), None)
    if server is None:
        return errs + ["no container named lfm"]
    args = server.get("args", [])
    port = int(flag(args, "--port") or 8080)
    if container_port(server, port) != port:
        errs.append(f"lfm listens on --port {port}, which is not a container port")
    targets = [p.get("number") for p in spec.get("targetPorts", [])]
    if targets != [port]:
        errs.append(f"the pool's targetPorts {targets} are not lfm's port {port}")
    given = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    for a in sorted({a for a in given if given.count(a) > 1}):
        errs.append(f"lfm option {a} is given twice")

    # The picker: Service, port, flags, config.
    ref = spec.get("endpointPickerRef", {})
    svc = one("Service", ref.get("name"))
    epp_c = epp["spec"]["template"]["spec"]["containers"][0]
    epp_args = epp_c.get("args", [])
    if svc is not None:
        if not selects(svc["spec"].get("selector", {}), epp["spec"]["template"]["metadata"].get("labels", {})):
            errs.append(f"Service {svc['metadata']['name']} does not select the picker's pods")
        sp = next((p for p in svc["spec"].get("ports", []) if p.get("port") == ref.get("port", {}).get("number")), None)
        if sp is None:
            errs.append(f"the pool's endpointPickerRef port {ref.get('port')} is not a port of {ref.get('name')}")
        elif str(container_port(epp_c, sp.get("targetPort"))) != flag(epp_args, "--grpc-port"):
            errs.append("the picker Service's port does not reach the picker's --grpc-port")
    if flag(epp_args, "--pool-name") != pool["metadata"]["name"]:
        errs.append(f"the picker's --pool-name {flag(epp_args, '--pool-name')} is not the pool {pool['metadata']['name']}")
    if epp["spec"]["template"]["spec"].get("serviceAccountName") not in by.get("ServiceAccount", {}):
        errs.append("the picker's service account does not exist")
    for f in METRIC_FLAGS:
        v = flag(epp_args, f)
        if v is not None and v not in metrics:
            errs.append(f"the picker's {f}={v} is not a metric lfm exports")
    for f in ("--total-queued-requests-metric", "--kv-cache-usage-percentage-metric"):
        if flag(epp_args, f) is None:
            errs.append(f"the picker has no {f} naming lfm's gauge")
    if flag(epp_args, "--lora-info-metric") != "":
        errs.append("lfm has no LoRA adapters: the picker's --lora-info-metric must be empty (scrape off)")
    cfg_path = flag(epp_args, "--config-file") or ""
    cfg_text = None
    for vm in epp_c.get("volumeMounts", []):
        if cfg_path.startswith(vm["mountPath"].rstrip("/") + "/"):
            vol = next((v for v in epp["spec"]["template"]["spec"].get("volumes", []) if v["name"] == vm["name"]), {})
            cm = by.get("ConfigMap", {}).get(vol.get("configMap", {}).get("name"))
            if cm:
                cfg_text = cm.get("data", {}).get(cfg_path[len(vm["mountPath"].rstrip("/")) + 1:])
    if cfg_text is None:
        errs.append(f"the picker's --config-file {cfg_path} is no key of a mounted ConfigMap")
        cfg = {}
    else:
        cfg = yaml.safe_load(cfg_text)
        if cfg.get("kind") != "EndpointPickerConfig":
            errs.append("the picker's config is not an EndpointPickerConfig")
        plugins = {p.get("name", p.get("type")): p for p in cfg.get("plugins", [])}
        for prof in cfg.get("schedulingProfiles", []):
            refs = [p.get("pluginRef") for p in prof.get("plugins", [])]
            for r in refs:
                if r not in plugins:
                    errs.append(f"profile {prof.get('name')} refers to an undefined plugin {r}")
            if not any(plugins.get(r, {}).get("type", "").endswith("-picker") for r in refs):
                errs.append(f"profile {prof.get('name')} has no picker")

    # The route.
    routes_objs = list(by.get("HTTPRoute", {}).values())
    if len(routes_objs) != 1:
        errs.append(f"{len(routes_objs)} HTTPRoutes, expected 1")
    for route in routes_objs:
        for rule in route["spec"].get("rules", []):
            for b in rule.get("backendRefs", []):
                if (b.get("group"), b.get("kind"), b.get("name")) != ("inference.networking.k8s.io", "InferencePool",
                                                                      pool["metadata"]["name"]):
                    errs.append(f"the route's backendRef {b} does not name the pool")
                if "port" in b and b["port"] not in targets:
                    errs.append(f"the route's backendRef port {b['port']} is not a port of the pool")

    # Health and drain.
    live = server.get("livenessProbe", {}).get("httpGet", {})
    ready = server.get("readinessProbe", {}).get("httpGet", {})
    if live.get("path") != "/health" or ready.get("path") != "/ready":
        errs.append(f"lfm's probes call {live.get('path')} and {ready.get('path')}, not /health and /ready")
    for p in (live, ready):
        if p.get("path") not in routes:
            errs.append(f"the probe path {p.get('path')} is not a route of lfm serve")
        if container_port(server, p.get("port")) != port:
            errs.append(f"the probe port {p.get('port')} is not lfm's port")
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    drain = float(flag(args, "--drain-delay") or 5) + float(flag(args, "--shutdown-grace") or 30)
    if grace < drain:
        errs.append(f"terminationGracePeriodSeconds {grace} is shorter than --drain-delay + --shutdown-grace ({drain})")

    # Model and volume.
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes", []) if "persistentVolumeClaim" in v]
    for c in claims:
        one("PersistentVolumeClaim", c)
    for init in pod["spec"].get("initContainers", []):
        if init.get("command", [])[:2] == ["lfm", "pull"] and init["command"][2:] != [flag(args, "--model")]:
            errs.append(f"the init container pulls {init['command'][2:]}, lfm serves {flag(args, '--model')}")

    # Device.
    limits = server.get("resources", {}).get("limits", {})
    if overlay["gpu"] != ("nvidia.com/gpu" in limits) or overlay["gpu"] != (flag(args, "--device") == "cuda"):
        errs.append(f"gpu={overlay['gpu']} but nvidia.com/gpu limit {limits.get('nvidia.com/gpu')}, "
                    f"--device {flag(args, '--device')}")

    # Precise prefix routing: the scorer must see lfm's blocks as lfm makes them.
    scorer = next((p for p in cfg.get("plugins", []) if p.get("type") == "precise-prefix-cache-scorer"), None)
    if overlay["precise"] != (scorer is not None):
        errs.append(f"precise={overlay['precise']} but the precise-prefix-cache-scorer is "
                    f"{'present' if scorer else 'absent'}")
    if scorer is not None:
        p = scorer.get("parameters", {})
        if p.get("tokenProcessorConfig", {}).get("blockSize") != int(flag(args, "--kv-block-size") or 16):
            errs.append("the scorer's blockSize is not lfm's KV block size")
        if p.get("tokenProcessorConfig", {}).get("hashSeed", "") != (flag(args, "--kv-events-hash-seed") or ""):
            errs.append("the scorer's hashSeed is not lfm's --kv-events-hash-seed")
        events = flag(args, "--kv-events") or ""
        disc = p.get("kvEventsConfig", {}).get("podDiscoveryConfig", {})
        m = re.fullmatch(r"tcp://\*:(\d+)", events)
        if not m or container_port(server, int(m.group(1))) != disc.get("socketPort"):
            errs.append(f"lfm's --kv-events {events!r} is not bound on the scorer's socketPort {disc.get('socketPort')}")
        want = dict(kv.split("=", 1) for kv in disc.get("podLabelSelector", "").split(",") if "=" in kv)
        if not selects(want, pod_labels):
            errs.append("the scorer's podLabelSelector does not select lfm's pods")
        if disc.get("podNamespace") not in ("", ns):
            errs.append(f"the scorer watches namespace {disc.get('podNamespace')}, the objects are in {ns}")
        tok = p.get("indexerConfig", {}).get("tokenizersPoolConfig", {})
        if tok.get("modelName") != flag(args, "--model"):
            errs.append("the scorer's tokenizer model is not the model lfm serves")
    return errs


def breakages(objs):
    """Copies of a good rendering, each broken in one way the check must report."""
    def edit(fn):
        c = copy.deepcopy(objs)
        fn({(o["kind"], o["metadata"]["name"]): o for o in c})
        return c
    return {
        "pool selector": edit(lambda b: b[("InferencePool", "lfm")]["spec"]["selector"]["matchLabels"].update(
            {"app.kubernetes.io/name": "vllm"})),
        "pool port": edit(lambda b: b[("InferencePool", "lfm")]["spec"]["targetPorts"][0].update({"number": 8080})),
        "route backend": edit(lambda b: b[("HTTPRoute", "lfm")]["spec"]["rules"][0]["backendRefs"][0].update(
            {"name": "other"})),
        "metric name": edit(lambda b: b[("Deployment", "lfm-epp")]["spec"]["template"]["spec"]["containers"][0]["args"]
                            .append("--total-running-requests-metric=lfm:no_such_gauge")),
        "probe path": edit(lambda b: b[("Deployment", "lfm")]["spec"]["template"]["spec"]["containers"][0]
                           ["readinessProbe"]["httpGet"].update({"path": "/healthz"})),
        "api version": edit(lambda b: b[("InferencePool", "lfm")].update(
            {"apiVersion": "inference.networking.x-k8s.io/v1alpha2"})),
        "grace period": edit(lambda b: b[("Deployment", "lfm")]["spec"]["template"]["spec"].update(
            {"terminationGracePeriodSeconds": 10})),
    }


def main():
    argv = sys.argv[1:]
    if not argv:
        print(__doc__)
        return 2
    source = argv[0]
    kubectl = os.environ.get("LFM_KUBECTL") or shutil.which("kubectl")
    if "--kubectl" in argv:
        kubectl = argv[argv.index("--kubectl") + 1]
    if not kubectl or not os.access(kubectl, os.X_OK):
        print("SKIPPED: no kubectl (Debian's kubernetes-client, scripts/setup.sh) to render deploy/kubernetes/")
        return 77
    metrics, routes = exported_metrics(source), server_routes(source)
    failed = False
    rendered = {}
    for name, overlay in OVERLAYS.items():
        path = os.path.join(source, "deploy/kubernetes/overlays", name)
        objs = render(kubectl, path)
        rendered[name] = objs
        errs = check(objs, overlay, metrics, routes)
        kinds = sorted(o["kind"] for o in objs)
        print(f"{name}: {len(objs)} objects ({', '.join(kinds)})")
        for e in errs:
            print(f"  FAIL {name}: {e}")
        failed |= bool(errs)
    for what, broken in breakages(rendered["cpu"]).items():
        if not check(broken, OVERLAYS["cpu"], metrics, routes):
            print(f"  FAIL self-test: a broken {what} was not reported")
            failed = True
    print("FAILED" if failed else "OK: every overlay renders and agrees with lfm serve; every breakage was caught")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
