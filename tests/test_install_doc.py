"""docs/install.md, followed on the stand-in API server: a new user's
`kubectl` commands, read from the page's "On a cluster" steps, reach a
scheduled pod.

Every `kubectl apply --server-side -f FILE` of a file in the repository,
the `kubectl wait --for=condition=PodScheduled` and the `kubectl get pod …
-o jsonpath` are run as the page writes them, with the real kubectl
(Debian's kubernetes-client, which `make test` installs) against the
stand-in; without kubectl the applies are sent as kubectl sends them
(`kube_apply.py`) and the wait is a poll of the pod. Files the steps
generate (`secrets.yaml`) are not in the repository and are left out, as
are the other commands (`rollout status`: no Deployment runs as pods
here). The bridge and placement run in this process against the stand-in
and an embedded NATS server, started once the install file is applied, as
the cluster-path tests run them (`test_cluster_path.cluster_path`); the
node agent's part is a published node topology.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from conftest import patience, wait_until
from kube_apply import apply_file
from test_cluster_path import cluster_path, gpu_node
from tidal_simulator.kube_api.kubeconfig import write_kubeconfig

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "install.md"
INSTALL_FILE = "k8s/install/nats.yaml"  # the bus the test runs
APPLY = re.compile(r"^kubectl apply --server-side -f (\S+)")
WAIT = re.compile(r"^kubectl wait --for=condition=(\w+) pod/([\w.-]+)")
GET_NODE = re.compile(r"^kubectl get pod ([\w.-]+) -o jsonpath='\{\.spec\.nodeName\}")
KUBECTL = shutil.which("kubectl")


def doc_commands(text: str) -> list[str]:
    """The `kubectl` lines of the shell blocks of the "On a cluster" section, in order."""
    section = text.split("\n## On a cluster", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("kubectl ")]


def applied_files(commands: list[str]) -> list[str]:
    """The repository files the commands apply server-side (generated ones left out)."""
    files = [m.group(1) for c in commands if (m := APPLY.match(c))]
    return [f for f in files if (ROOT / f).is_file()]


def test_the_page_installs_then_adds_the_tenant_then_the_pod_and_waits_for_it():
    commands = doc_commands(DOC.read_text())
    files = applied_files(commands)
    order = [files.index(f) for f in (INSTALL_FILE, "k8s/examples/tenant.yaml", "k8s/examples/sample-pod.yaml")]
    assert order == sorted(order), files
    assert "k8s/install/kafka.yaml" in DOC.read_text()
    assert [WAIT.match(c).groups() for c in commands if WAIT.match(c)] == [("PodScheduled", "tidal-sample")]
    assert [GET_NODE.match(c).group(1) for c in commands if GET_NODE.match(c)] == ["tidal-sample"]


def test_the_reader_finds_the_commands_of_the_steps_only():
    text = ("# t\n\n## On a cluster\n\n1. x\n\n   ```sh\n   kubectl apply --server-side -f k8s/install/nats.yaml  # or\n"
            "   tidal nats-config\n   ```\n\n   ```\n   $ kubectl get tenants\n   ```\n\n## Other\n\n```sh\nkubectl x\n```\n")
    assert doc_commands(text) == ["kubectl apply --server-side -f k8s/install/nats.yaml  # or"]
    assert applied_files(doc_commands(text)) == ["k8s/install/nats.yaml"]


def scheduled(pod: dict | None, condition: str) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return bool((pod or {}).get("spec", {}).get("nodeName")) and any(
        c.get("type") == condition and c.get("status") == "True" for c in conditions)


class Kubectl:
    """The page's commands against one API server: the real kubectl when there is one."""

    def __init__(self, url: str, home: Path) -> None:
        self.url, self.home = url, home
        self.config = write_kubeconfig(home / "kubeconfig", url)

    async def run(self, command: str) -> str:
        args = shlex.split(command, comments=True)[1:]
        env = {"HOME": str(self.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # its discovery cache there
        done = await asyncio.to_thread(subprocess.run, [KUBECTL, "--kubeconfig", str(self.config), *args],
                                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=patience(180))
        assert done.returncode == 0, f"{command}: {done.stderr.strip()}"
        return done.stdout

    async def apply(self, name: str) -> None:
        if KUBECTL:
            await self.run(f"kubectl apply --server-side -f {name}")
        else:
            await apply_file(self.url, ROOT / name)


async def test_a_new_user_following_docs_install_md_reaches_a_scheduled_pod(nats_server, namespace, tmp_path):
    commands = doc_commands(DOC.read_text())
    files = applied_files(commands)
    installed = files.index(INSTALL_FILE) + 1
    wait = next(c for c in commands if WAIT.match(c))
    condition, pod_name = WAIT.match(wait).groups()
    get_node = next(c for c in commands if GET_NODE.match(c))

    async def install(kube) -> None:  # steps 1-3: what is applied before the Deployments' pods start
        kubectl = Kubectl(kube.url, tmp_path)
        for name in files[:installed]:
            if name.startswith("k8s/install/") and name != INSTALL_FILE:
                continue  # the other bus
            await kubectl.apply(name)

    # one node as its agent reports it: 2 NUMA nodes of 4 CPUs, four A100s (the sample pod asks 4
    # exclusive CPUs on one NUMA node and half an A100 or V100)
    async with cluster_path(nats_server, namespace, gpu_node("g1", 4), before_bridge=install) as path:
        assert {crd.kind for crd in path.kube.custom.crds.values()} == {"Tenant", "FairShare"}
        assert path.kube.objects["deployments.apps"], "the install file's Deployments are stored"
        await path.start_placement()
        kubectl = Kubectl(path.kube.url, tmp_path)
        for name in files[installed:]:  # steps 4-5: the tenant, the pod
            await kubectl.apply(name)
        if KUBECTL:  # step 6
            await kubectl.run(wait)
            assert (await kubectl.run(get_node)).strip() == "g1"
        else:
            await wait_until(lambda: scheduled(path.kube.pod("default", pod_name), condition), 120,
                             f"pod/{pod_name} {condition}")
        assert path.bound(pod_name) == "g1"
