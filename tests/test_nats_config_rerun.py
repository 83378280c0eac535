"""`tidal nats-config` over thousands of nodes (issue 17 item 7, issue 52
item 5): a run makes a key only for a user that has none, so a re-run makes
none and writes the same config; the server config names no user (it holds
the operator and account JWTs), so it is as small at 2,000 nodes as at one,
and a new node changes nothing in it; a removed node is revoked in the
account JWT. The sizes and times are measured by `bench/nats_identity.py`."""

from __future__ import annotations

from tidal_bus import nkey
from tidal_bus.nats_jwt import decode_claims, parse_creds
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

    joined = run(nodes + ["node-new"])  # one node joins: a key of its own, the server config unchanged
    assert len(made) == 1 and joined == first
    credentials = tmp_path / "nats.conf.credentials"
    gone = nkey.user_public_key((credentials / f"topology-{nodes[0]}.nk").read_text())
    new = nkey.user_public_key(made[0])
    issued = decode_claims(parse_creds((credentials / "topology-node-new.creds").read_text()).jwt)
    assert issued["sub"] == new and new not in first
    assert gone not in first  # no user is listed

    third = run(nodes[1:] + ["node-new"])  # one node leaves: revoked in the account JWT, nothing else grows
    claims = decode_claims(next(line.split(": ", 1)[1] for line in third.splitlines()
                                if line.strip().startswith(accounts(third))))
    assert list(claims["nats"]["revocations"]) == [gone]
    assert len(third) < len(first) + 200

    one = tmp_path / "one"
    assert tidal(["nats-config", "--cluster", "prod", "--nodes", "node-x", "--out", str(one / "nats.conf")]) == 0
    assert abs(len((one / "nats.conf").read_text()) - len(first)) < 200  # 1 node or 2,000: the same size


def accounts(config: str) -> str:
    """The deployment account's public key, as the config's header names it."""
    return next(word for word in config.split() if word.startswith("A") and len(word) == 56)
