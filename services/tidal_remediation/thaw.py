"""Thawing frozen pods on a cool NUMA node (SPEC §E hotspot step 3).

Runs on a NUMA node n with measured load(n) < low. One pod at a time, while
the projected load'(n) < low, the next pod in this order is thawed:

    smallest usage when frozen first, ties: frozen longest first, then name

if every NUMA node k it is on is below low now, none of them is cooling
down, and none goes above high afterwards:

    load'(k) = load(k) + share(k) / capacity(k) ≤ high

(else it would be hot again at once and re-frozen: flapping). A pod that
does not fit is passed over with a note, and smaller ones behind it may
still go.

Why not LIFO: the freeze order sheds load fast (largest first); thawing
wants the opposite. Smallest first adds the least load per step, so the
estimate — a usage measured before the freeze — errs least, and under a
given headroom the most pods get back to work. LIFO would thaw the newest
episode's pods ahead of smaller, older ones. A big pod waits exactly as
long as the headroom for it is missing, and the note says so every round.

Frozen BE pods the agent reports but the memory has no record of (the log
that froze them is gone) are thawed too, after the known ones and at most
one per NUMA node per round: their usage is unknown, so the next
measurement must show it before anything else is thawed there.
"""

from __future__ import annotations

from .round_state import RoundState


def thaw_step(r: RoundState, numa: int) -> None:
    """Step 3: thaw frozen pods on `numa`, smallest first, while it is cold."""
    low, high, node = r.settings.low_threshold, r.settings.high_threshold, r.state.node
    known = sorted((f for f in r.memory.frozen_on(node) if numa in (dict(f.shares) or {f.numa: 0.0})),
                   key=lambda f: (f.cpu_milli is None, f.cpu_milli or 0.0, f.frozen_at, f.pod))
    queue: list[tuple[str, float | None, dict[int, float]]] = [
        (f.pod, f.cpu_milli, dict(f.shares) or {f.numa: f.cpu_milli or 0.0}) for f in known]
    if r.settings.thaw_unrecorded_frozen:
        queue += [(p.name, None, {n: 0.0 for n in p.numa_nodes if n in r.state.numa}) for p in r.state.pods
                  if p.frozen and p.qos == "BE" and numa in p.numa_nodes and not r.memory.is_frozen(node, p.name)]
    if not queue or not r.check_cool(numa):
        return
    for pod, cpu, shares in queue:
        if r.loads[numa] >= low or not r.room():
            return
        if pod in r.busy:
            continue
        if any(n not in r.loads or r.loads[n] >= low for n in shares):
            r.notes.append(f"{pod}: not thawed, a NUMA node it is on is not below low {low:.3f}")
            continue
        if any(n in r.cooling for n in shares):
            r.notes.append(f"{pod}: not thawed, a NUMA node it is on is cooling down")
            continue
        after = {n: r.loads[n] + milli / r.state.numa[n].capacity_milli for n, milli in shares.items()}
        if any(load > high for load in after.values()):
            r.notes.append(f"{pod}: not thawed, its {cpu or 0:.0f} milli-CPU would take NUMA "
                           f"{max(after, key=after.get)} to {max(after.values()):.3f} > high {high:.3f}")
            continue
        before = r.loads[numa]
        r.shift(shares, +1)
        usage = f"{cpu:.0f} milli-CPU when frozen" if cpu is not None else "usage unknown (no record of the freeze)"
        r.add("thaw", pod, numa,
              f"NUMA {numa} load {before:.3f} < low {low:.3f}: thaw {pod}, smallest usage first ({usage}); "
              f"projected {before:.3f} -> {r.loads[numa]:.3f}", before, low, cpu, shares)
        if cpu is None:
            r.notes.append(f"NUMA {numa}: thawed a pod of unknown usage, no more thaws here until re-measured")
            return
