"""`tidal nats-config` at 20,000 nodes (issue 17, item 7): it bcrypt-hashed
every user at cost 11 on every run (200 nodes: 22 s, and again on a re-run;
20,000 nodes: past 300 s). Now a re-run hashes only new or changed
passwords, and a password it generated (256 random bits) is hashed at
bcrypt's minimum cost; one an operator wrote keeps the full cost."""

from __future__ import annotations

import json
import time

import pytest

from tidal_cli import nats_config_cmd
from tidal_cli.main import main as tidal

NODES = 20_000


@pytest.fixture
def counted(monkeypatch):
    """Every bcrypt hash made, with its cost."""
    costs: list[int] = []
    real = nats_config_cmd.hash_password

    def counting(password: str, cost: int = nats_config_cmd.BCRYPT_COST) -> str:
        costs.append(cost)
        return real(password, cost)

    monkeypatch.setattr(nats_config_cmd, "hash_password", counting)
    return costs


def _run(tmp_path, nodes_file) -> float:
    started = time.monotonic()
    assert tidal(["nats-config", "--cluster", "prod", "--nodes-file", str(nodes_file),
                  "--out", str(tmp_path / "nats.conf")]) == 0
    return time.monotonic() - started


def test_twenty_thousand_nodes_in_seconds_and_a_rerun_hashes_only_what_changed(tmp_path, counted):
    nodes_file = tmp_path / "nodes.txt"
    nodes_file.write_text("\n".join(f"node-{i:05d}.ec2.internal" for i in range(NODES)) + "\n")
    users = NODES + 7  # six central services and the admin
    first = _run(tmp_path, nodes_file)
    assert len(counted) == users and set(counted) == {nats_config_cmd.MIN_COST}
    # Loose bounds: this machine's 2 cores are shared. Before: 20,000 x ~0.12 s of bcrypt.
    assert first < 150, f"first run took {first:.0f}s"

    counted.clear()
    again = _run(tmp_path, nodes_file)
    assert counted == [] and again < 40, f"re-run took {again:.0f}s and hashed {len(counted)}"

    credentials = tmp_path / "nats.conf.credentials"
    (credentials / "admin.password").write_text("an operator's own password\n")
    nodes_file.write_text(nodes_file.read_text() + "node-new\n")
    _run(tmp_path, nodes_file)
    assert sorted(counted) == [nats_config_cmd.MIN_COST, nats_config_cmd.BCRYPT_COST]  # node-new; the admin's

    config = json.loads((tmp_path / "nats.conf").read_text().split("\n", 3)[3])
    entries = {entry["user"]: entry["password"] for entry in config["authorization"]["users"]}
    assert len(entries) == users + 1
    assert entries["admin"].startswith("$2b$11$") and entries["topology-node-new"].startswith("$2b$04$")
    assert "an operator's own password" not in (tmp_path / "nats.conf").read_text()
    assert (credentials / "hashes.json").stat().st_mode & 0o777 == 0o600
