"""`tidal nats-config` over thousands of nodes (issue 17, item 7): it
bcrypt-hashed every user's password, minutes at 20,000 nodes. Users are
nkeys now: a run makes a key only for a user that has none, so a re-run
makes none and writes the same config (reloading the server changes
nothing), a new node costs one key, and a removed node's key leaves the
config. The time it takes is measured by `bench/nats_config.py`, not here."""

from __future__ import annotations

from tidal_bus import nkey
from tidal_cli import nats_config_cmd
from tidal_cli.main import main as tidal

NODES = 2_000
CENTRAL = 8  # seven central services (the webhook too) and the admin


def test_a_rerun_makes_keys_only_for_new_users_and_drops_removed_ones(tmp_path, monkeypatch, capsys):
    made: list[str] = []

    def counted() -> tuple[str, str]:
        key = nkey.new_user_key()
        made.append(key[0])
        return key

    monkeypatch.setattr(nats_config_cmd, "new_user_key", counted)
    nodes = [f"node-{i:05d}.ec2.internal" for i in range(NODES)]
    nodes_file, out = tmp_path / "nodes.txt", tmp_path / "nats.conf"

    def run(names: list[str]) -> str:
        nodes_file.write_text("\n".join(names) + "\n")
        assert tidal(["nats-config", "--cluster", "prod", "--nodes-file", str(nodes_file), "--out", str(out)]) == 0
        return out.read_text()

    first = run(nodes)
    assert len(made) == NODES + CENTRAL and len(set(made)) == len(made)
    made.clear()
    assert run(nodes) == first and made == []  # same keys, same config
    assert f"0 new key(s), {NODES + CENTRAL} kept" in capsys.readouterr().out

    third = run(nodes[1:] + ["node-new"])  # one node leaves, one joins
    assert len(made) == 1
    credentials = tmp_path / "nats.conf.credentials"
    gone = nkey.user_public_key((credentials / f"topology-{nodes[0]}.nk").read_text())
    new = nkey.user_public_key(made[0])
    assert gone in first and gone not in third and new in third and new not in first
    assert third.count('"nkey": "U') == NODES + CENTRAL
