"""A Ray cluster of two nodes on this machine, and `tsopt tune --ray-address` on it.

Real parts throughout: two Ray nodes (``ray.cluster_utils.Cluster``: a head and a second
node, one CPU each, each with its own raylet and resources), the `tsopt` command in its own
process joining them, the real DSL build of the copy space in the nodes' workers, a real
SQLite database. Nothing is measured (no GPU here): built candidates go to the bundle.

What is shown: the builds ran on both nodes and the database says which node built each
candidate (``tsopt_candidate.build_node``, a Ray node id), which the summary repeats; a node
whose raylet is killed (SIGKILL, by its PID) mid-study loses nothing: the build it held is
retried on the node left, every trial is finished, no build is recorded as failed.

What it does not cover (README "Ray across machines"): separate file systems (both nodes
share this machine's, so ``.tsopt/artifacts`` is shared storage by construction), separate
venvs, a database reached over the network.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # two-node Ray clusters: a minute of setup each

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]
PROBLEM = ["--rows", "4096", "--cols", "128"]


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    """A head of 1 CPU and a second node of 1 CPU (each node's resource ``node_a``/``node_b``
    marks it); 2 cores in all, this machine's."""
    from ray.cluster_utils import Cluster

    env = {"CUTE_DSL_ARCH": "sm_90a"}
    os.environ.update(env)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node_a": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"node_b": 1})
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def tune(cluster: Any, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`tsopt tune copy` joining the cluster, in its own process, from ``tmp_path`` (its
    artifact cache and bundle land there)."""
    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", PYTHONPATH=str(REPO), COLUMNS="200",
               TSOPT_TS_MEMO="none")
    return subprocess.Popen(
        [sys.executable, "-m", "tsopt", "tune", "copy", *PROBLEM, "--db", db,
         "--ray-address", cluster.address, "--study", "two-nodes", *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def builds(tmp_path: Path) -> list[tuple[str, str, str | None, float | None, str | None]]:
    """(genome hash, build status, build node, wait for a build slot, error) per built
    candidate of the study, read from the database."""
    path = tmp_path / "tsopt.db"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            return list(db.execute(
                "SELECT c.genome_hash, b.status, c.build_node, c.build_wait_s, b.error "
                "FROM tsopt_candidate c JOIN tsopt_build b ON b.id = c.build_id"))
        except sqlite3.OperationalError:  # its tables are not made yet
            return []


def unfinished_not_in_bundle(tmp_path: Path) -> list[int]:
    """Trials neither finished nor waiting in the bundle for `tsopt measure` (none is lost)."""
    with sqlite3.connect(tmp_path / "tsopt.db") as db:
        return [n for (n,) in db.execute(
            "SELECT t.number FROM trials t WHERE t.state = 'RUNNING' AND NOT EXISTS ("
            "SELECT 1 FROM trial_user_attributes a WHERE a.trial_id = t.trial_id "
            "AND a.key = 'awaiting_measurement')")]


def building(raylet_pid: int) -> bool:
    """Whether a worker of this raylet is running a build task now (Ray titles a worker
    process after the task it runs)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if parent == raylet_pid and title.startswith("ray::evaluate_task"):
            return True
    return False


def node_ids(cluster: Any) -> tuple[str, str]:
    head, second = cluster.head_node, cluster.list_all_nodes()[1]
    return head.node_id, second.node_id


def finish(process: subprocess.Popen[str], limit_s: float = 400) -> str:
    try:
        out, _ = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"tsopt tune did not finish in {limit_s} s:\n{out}")
    assert process.returncode == 0, out
    return out


def test_a_study_builds_on_both_nodes_and_records_which_built_what(
        two_nodes: Any, tmp_path: Path) -> None:
    head, second = node_ids(two_nodes)
    out = finish(tune(two_nodes, tmp_path, "--workers", "2", "--built", "4"))
    rows = builds(tmp_path)
    assert len(rows) >= 4 and all(status == "ok" for _, status, *_ in rows), rows
    built_on = {node for _, _, node, _, _ in rows}
    assert built_on == {head, second}, (built_on, head, second)  # both nodes built
    assert all(wait is not None and wait >= 0 for *_, wait, _ in rows)
    assert "workers: 2 build slots on" in out and "(2 CPUs, 0 GPUs)" in out
    assert "built on: " in out and head[:16] in out and second[:16] in out
    assert "waited for a build: median" in out


def test_a_node_lost_mid_study_loses_nothing(two_nodes: Any, tmp_path: Path) -> None:
    head, second = node_ids(two_nodes)
    raylet = two_nodes.list_all_nodes()[1].all_processes["raylet"][0].process
    process = tune(two_nodes, tmp_path, "--workers", "2", "--built", "5")
    deadline = time.monotonic() + 300
    # Once the second node has built a candidate and is building another (a worker of its
    # raylet runs the task), its raylet is killed: that build is lost with the node.
    while not (any(node == second for _, _, node, _, _ in builds(tmp_path))
               and building(raylet.pid)):
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the second node built nothing"
        time.sleep(0.1)
    os.kill(raylet.pid, signal.SIGKILL)
    before = {genome for genome, *_ in builds(tmp_path)}
    out = finish(process)
    rows = builds(tmp_path)
    after = [node for genome, _, node, _, _ in rows if genome not in before]
    killed_at = len(before)
    assert len(rows) >= 5 and len(rows) > killed_at, (rows, out)
    # Nothing lost: every build recorded is a success (the one the lost node held was retried
    # on the head), every trial finished or waiting in the bundle with its artifact.
    assert all(status == "ok" for _, status, *_ in rows), rows
    assert {node for _, _, node, _, _ in rows} == {head, second}
    # Builds went on on the head (a result the lost node sent just before it died may still
    # have been on its way: it is recorded, as its own).
    assert after.count(head) >= 1 and after.count(second) <= 1, after
    assert unfinished_not_in_bundle(tmp_path) == []
    bundled = (tmp_path / ".tsopt" / "bundles" / "two-nodes").glob("artifacts/*/artifact.json")
    assert len(list(bundled)) >= len(rows)
    assert "worker failed" not in out and ", failed" not in out
