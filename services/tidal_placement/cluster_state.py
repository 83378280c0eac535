"""The scheduler cache (SPEC §A steps 4–5): every node's free resources in
numpy arrays indexed by node row, updated one row at a time.

Free figures, always clamped at 0 (an allocatable lowered below what is held
leaves a node full, never negative):

    cpu_free[r]      = allocatable_cpu[r] − Σ cpu_milli held on r     (node level; may be oversold)
    mem_free[r]      = allocatable_mem[r] − Σ memory_mib held on r
    numa_free[r, j]  = allocatable exclusive CPUs of NUMA j − Σ exclusive CPUs held there
    gpu_free[r, g]   = 1000 − Σ milli held on device g (0 for padding / unhealthy devices)

`assume` deducts a decision at once, refused when anything would go
negative; `forget` returns exactly what was assumed (bind failed), `confirm`
marks it bound, `release` returns a pod's resources (pod deleted). `record`
takes what the cluster says a pod holds, unchecked (it holds it whether or
not it fits), on a node not known yet too: such a pod is parked and counted
the moment its node's topology arrives. Expected refusals are `Outcome` values.

Devices the cluster cannot name: a pod bound by another scheduler that
asked for GPUs, or a Tidal pod whose decision could not be read back, holds
`Floating` devices: whole GPUs (or shares) and exclusive CPUs on its node,
but not which ones. They are counted all the same, on devices chosen by
`_settle` from the node's named holdings alone (GPUs from the highest index
down, CPUs from the NUMA nodes with most free), so the cache is the same
whatever order the holdings arrived in.
Columns are padded: `numa_valid` / `gpu_valid` say which entries are real.
"""

from __future__ import annotations

from collections.abc import Callable

from tidal_schemas import NodeTopology

from .allocation import NONE_FLOATING, OK, Allocation, Floating, Outcome
from .cluster_arrays import GPU_ARRAYS, NUMA_ARRAYS, ROW_ARRAYS, GPU_MILLI
from .cluster_nodes import ClusterNodes
from .floating import place_floating
from .node_spec import NodeSpec, node_spec

__all__ = ["GPU_MILLI", "NONE_FLOATING", "Allocation", "ClusterState", "Floating", "OK", "Outcome"]


class ClusterState(ClusterNodes):
    """Free resources of every node, as arrays; see the module docstring."""

    def __init__(self, capacity: int = 64, numa_cols: int = 8, gpu_cols: int = 8):
        self.rows: dict[str, int] = {}
        self.names: list[str | None] = []
        self.specs: dict[int, NodeSpec] = {}
        self.models: list[str] = []
        self.model_ids: dict[str, int] = {}
        self._spare: list[int] = []
        # what each pod holds; the few not bound yet, or holding devices unnamed,
        # on the side (a record per pod of the three was 56 bytes of 150,000 pods)
        self._held: dict[str, Allocation] = {}
        self._assumed: dict[str, None] = {}  # a dict as a set: a third of the room
        self._floating: dict[str, Floating] = {}
        self.on_held: Callable[[str], None] = lambda key: None  # told each pod key whose holding changed
        # node name -> held pod keys (known node or not); a dict as an ordered
        # set: a set of five keys takes 1.2 KB, the dict a third of that
        self._pods_on: dict[str, dict[str, None]] = {}
        self._floating_on: dict[int, set[str]] = {}  # row -> keys holding floating devices there
        self._charged: dict[int, list[tuple[str, int, int]]] = {}  # row -> floating charges ("numa"/"gpu", col, n)
        self._blocked: dict[int, set[str]] = {}
        self._blocked_masks: tuple[int, list] | None = None  # (n, masks) built last
        self._numa_col: dict[int, dict[int, int]] = {}
        self._gpu_col: dict[int, dict[str, int]] = {}
        self.mixed_model_rows: set[int] = set()
        self.sliced_rows: set[int] = set()  # rows whose spec is `sliced`
        self._touched = []
        self._resize(capacity, numa_cols, gpu_cols)

    # ---- nodes -------------------------------------------------------------

    def upsert_node(self, topology: NodeTopology) -> None:
        """Add or replace a node's inventory; pods already held on it stay held."""
        spec = node_spec(topology)
        r = self.rows.get(spec.name)
        if new := r is None:
            r = self._new_row(spec.name)
        self._resize(len(self.names), max(self.numa_cols, len(spec.numa_ids)), max(self.gpu_cols, len(spec.gpu_ids)))
        self.specs[r] = spec
        self.present[r] = True
        self.exclusive_ok[r] = spec.exclusive
        self.cpu_alloc[r], self.mem_alloc[r] = spec.cpu_milli, spec.memory_mib
        for name in NUMA_ARRAYS:
            getattr(self, name)[r] = NUMA_ARRAYS[name][1]
        n = len(spec.numa_ids)
        self.numa_count[r] = n
        self.numa_valid[r, :n] = True
        self.numa_id[r, :n] = spec.numa_ids
        self.numa_alloc[r, :n] = spec.numa_cpus
        self._numa_col[r] = {numa: j for j, numa in enumerate(spec.numa_ids)}
        for name in GPU_ARRAYS:
            getattr(self, name)[r] = GPU_ARRAYS[name][1]
        g = len(spec.gpu_ids)
        self.gpu_valid[r, :g] = spec.gpu_healthy
        self.gpu_virtual[r, :g] = spec.gpu_virtual
        self.gpu_root[r, :g] = spec.gpu_roots or range(g)
        self.gpu_weight[r, :g] = spec.gpu_weights or (GPU_MILLI,) * g
        self.gpu_dev_model[r, :g] = [self._model_id(m) for m in spec.gpu_models]
        self.gpu_model[r] = -1 if spec.model is None else self._model_id(spec.model)
        (self.mixed_model_rows.add if len(set(spec.gpu_models)) > 1 else self.mixed_model_rows.discard)(r)
        (self.sliced_rows.add if spec.sliced else self.sliced_rows.discard)(r)
        self.gpu_count[r] = sum(spec.gpu_healthy)
        self._gpu_col[r] = {gpu: k for k, gpu in enumerate(spec.gpu_ids)}
        self._charged.pop(r, None)  # device arrays were reset: floating charges are redone below
        if new:  # pods parked until their node was known
            for key in self._pods_on.get(spec.name, ()):
                a = self._held[key]
                self.cpu_used[r] += a.cpu_milli
                self.mem_used[r] += a.memory_mib
                if key in self._floating:
                    self._floating_on.setdefault(r, set()).add(key)
        self._reapply_devices(r)
        self.schedulable[r] = not self._blocked.get(r)
        self._refresh_node(r)
        self._recount(r)
        self._settle(r)
        self._order_numa(r)

    def remove_node(self, name: str) -> list[str]:
        """Drop a node; its pods stay held, parked until it comes back or they
        are released. Returns their keys."""
        r = self.rows.pop(name, None)
        if r is None:
            return []
        for side in (self._floating_on, self._charged):
            side.pop(r, None)
        for table in (ROW_ARRAYS, NUMA_ARRAYS, GPU_ARRAYS):
            for attr, (_, fill) in table.items():
                getattr(self, attr)[r] = fill
        self.names[r] = None
        self.mixed_model_rows.discard(r)
        self.sliced_rows.discard(r)
        for side in (self.specs, self._blocked, self._numa_col, self._gpu_col):
            side.pop(r, None)
        self._blocked_masks = None
        self._spare.append(r)
        return sorted(self._pods_on.get(name, ()))

    # ---- pods --------------------------------------------------------------

    def assume(self, pod_key: str, allocation: Allocation) -> Outcome:
        """Deduct a decision now; refused (nothing changed) if any figure would go negative."""
        if pod_key in self._held:
            return Outcome(False, f"{pod_key} is already held on {self._held[pod_key].node}")
        r = self.rows.get(allocation.node)
        if r is None:
            return Outcome(False, f"unknown node {allocation.node}")
        problem = self._check(r, allocation)
        if problem:
            return Outcome(False, problem)
        self._hold(pod_key, allocation, NONE_FLOATING, confirmed=False)
        return OK

    def record(self, pod_key: str, allocation: Allocation, floating: Floating = NONE_FLOATING, *,
               confirmed: bool = True) -> Outcome:
        """Hold what the cluster (or the decision log) says the pod holds,
        replacing what it held before. Unchecked: a pod the cluster runs is
        counted even where it overbooks (the free figures then stay at 0).
        On a node not known yet it is parked (the outcome says so)."""
        held = self._held.get(pod_key)
        if held is not None and (held, self._floating.get(pod_key, NONE_FLOATING)) == (allocation, floating):
            if confirmed:
                self._assumed.pop(pod_key, None)
            return OK
        if held is not None:
            self.release(pod_key)
        self._hold(pod_key, allocation, floating, confirmed)
        if allocation.node not in self.rows:
            return Outcome(True, f"node {allocation.node} not known yet: held until its topology arrives")
        return OK

    def confirm(self, pod_key: str) -> Outcome:
        """Mark an assumed pod as bound."""
        if pod_key not in self._held:
            return Outcome(False, f"{pod_key} is not held")
        self._assumed.pop(pod_key, None)
        return OK

    def forget(self, pod_key: str) -> Allocation | None:
        """Undo an assume whose bind failed; returns what was returned to the cache."""
        return self.release(pod_key) if pod_key in self._assumed else None

    def release(self, pod_key: str) -> Allocation | None:
        """Return a held pod's resources (assumed or bound); None when not held."""
        held = self._held.pop(pod_key, None)
        if held is None:
            return None
        self._assumed.pop(pod_key, None)
        floating = self._floating.pop(pod_key, None)
        node = held.node
        self._pods_on[node].pop(pod_key, None)
        if not self._pods_on[node]:
            del self._pods_on[node]
        r = self.rows.get(node)
        if r is not None:
            self._apply(r, held, -1)
            if floating:
                self._floating_on[r].discard(pod_key)
            self._settle(r)
        self.on_held(pod_key)
        return held

    def holdings(self) -> dict[str, tuple[Allocation, Floating, bool]]:
        """Every held pod: (allocation, floating devices, confirmed)."""
        return {key: (a, self._floating.get(key, NONE_FLOATING), key not in self._assumed)
                for key, a in self._held.items()}

    def held(self, pod_key: str) -> Allocation | None:
        """The allocation a pod holds, if any."""
        return self._held.get(pod_key)

    # ---- internals ---------------------------------------------------------

    def _check(self, r: int, a: Allocation) -> str:
        if a.cpu_milli < 0 or a.memory_mib < 0:
            return "negative request"
        if a.cpu_milli > self.cpu_free[r]:
            return f"cpu: asks {a.cpu_milli}m, {self.cpu_free[r]}m free on {a.node}"
        if a.memory_mib > self.mem_free[r]:
            return f"memory: asks {a.memory_mib}Mi, {self.mem_free[r]}Mi free on {a.node}"
        for numa, count in a.numa_cpus:
            j = self._numa_col[r].get(numa)
            if j is None or not self.exclusive_ok[r]:
                return f"numa {numa} on {a.node} offers no exclusive CPUs"
            if count < 0 or count > self.numa_free[r, j]:
                return f"numa {numa}: asks {count} CPUs, {self.numa_free[r, j]} free on {a.node}"
        if len({gpu for gpu, _ in a.gpus}) != len(a.gpus):
            return "a GPU is named twice"
        for gpu, milli in a.gpus:
            k = self._gpu_col[r].get(gpu)
            if k is None:
                return f"unknown GPU {gpu} on {a.node}"
            if milli <= 0 or milli > self.gpu_free[r, k]:
                return f"GPU {gpu}: asks {milli} milli, {self.gpu_free[r, k]} free on {a.node}"
        return ""

    def _apply(self, r: int, a: Allocation, sign: int) -> None:
        self.cpu_used[r] += sign * a.cpu_milli
        self.mem_used[r] += sign * a.memory_mib
        self._refresh_node(r)
        # only the parts the pod touched need their derived figures redone
        # Ids the node does not report count nowhere (a recorded pod may name
        # them; `assume` refuses them), as when a re-reported node drops an id.
        numa_cols, gpu_cols = self._numa_col[r], self._gpu_col[r]
        if a.numa_cpus:
            for numa, count in a.numa_cpus:
                if numa in numa_cols:
                    self.numa_used[r, numa_cols[numa]] += sign * count
            self._refresh_numa(r)
        if a.gpus:
            for gpu, milli in a.gpus:
                if gpu in gpu_cols:
                    self.gpu_used[r, gpu_cols[gpu]] += sign * milli
            self._refresh_gpus(r)

    def _hold(self, pod_key: str, allocation: Allocation, floating: Floating, confirmed: bool) -> None:
        self._held[pod_key] = allocation
        if not confirmed:
            self._assumed[pod_key] = None
        if floating:
            self._floating[pod_key] = floating
        self._pods_on.setdefault(allocation.node, {})[pod_key] = None
        r = self.rows.get(allocation.node)
        if r is not None:
            self._apply(r, allocation, +1)
            if floating:
                self._floating_on.setdefault(r, set()).add(pod_key)
            self._settle(r)
        self.on_held(pod_key)

    def _settle(self, r: int) -> None:
        """Place the row's floating devices again (`floating.place_floating`)."""
        charged, keys = self._charged.pop(r, []), self._floating_on.get(r)
        if not charged and not keys:
            return
        for kind, col, amount in charged:
            (self.numa_used if kind == "numa" else self.gpu_used)[r, col] -= amount
        gpus = len(self.specs[r].gpu_ids) if r in self.specs else 0
        charges = place_floating([self._floating[key] for key in sorted(keys or ())], self.gpu_used[r, :gpus],
                                 self.gpu_valid[r, :gpus], self.gpu_root[r, :gpus], self.gpu_weight[r, :gpus],
                                 self.numa_alloc[r, :int(self.numa_count[r])], self.numa_used[r, :int(self.numa_count[r])])
        if charges:
            self._charged[r] = charges
        self._recount(r)

    def _reapply_devices(self, r: int) -> None:
        # A re-reported node keeps its pods: put their per-NUMA and per-GPU
        # holdings back by id; ids the node no longer reports are dropped.
        for key in self._pods_on.get(self.names[r], ()):
            a = self._held[key]
            for numa, count in a.numa_cpus:
                if numa in self._numa_col[r]:
                    self.numa_used[r, self._numa_col[r][numa]] += count
            for gpu, milli in a.gpus:
                if gpu in self._gpu_col[r]:
                    self.gpu_used[r, self._gpu_col[r][gpu]] += milli
