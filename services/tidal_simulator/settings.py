"""Settings of the simulator service (env prefix TIDAL_SIMULATOR_).

`tidal simulate` builds the workload itself and drives the service; run on
its own (`tidal run simulator`) the service reads its workload from these
settings (a scenario file, an openb trace, else the synthetic generator)
and releases pods by their arrival times.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tidal_runtime import ServiceSettings


class SimulatorSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_SIMULATOR_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "simulator"

    scenario: str | None = Field(None, description="scenario YAML to run")
    nodes_csv: str | None = Field(None, description="openb node CSV (with pods_csv)")
    pods_csv: str | None = Field(None, description="openb pod CSV (with nodes_csv)")
    synthetic: str = Field("", description="generator knobs, e.g. nodes=20,pods=200,tenants=3")
    seed: int = Field(42, description="seed of the synthetic generator and of bind failures")
    clock: Literal["simulated", "real-time"] = Field("simulated", description="simulated: each tick adds tick_s, as "
                                                     "fast as the pipeline goes; real-time: scenario time is wall time")
    tick_s: float | None = Field(None, gt=0, description="scenario seconds per tick (default: the workload's)")
    start: datetime | None = Field(None, description="scenario time 0 (default: when the service starts)")
    bind_failure_rate: float = Field(0.0, ge=0, le=1, description="share of placed decisions refused (seeded)")
    metrics_heartbeat_s: float | None = Field(None, gt=0, description="re-sample a node whose sample cannot have "
                                              "changed only this often (default: every tick, as an agent does)")
    settle_quiet_s: float = Field(0.05, ge=0, description="the pipeline is settled after this long without input")
    settle_max_s: float = Field(10.0, gt=0, description="never wait longer than this for the pipeline to settle")
    node_status_s: float = Field(10.0, gt=0, description="each kubelet writes its node's status this often, in "
                                 "simulated seconds (kubelet's nodeStatusUpdateFrequency)")
    node_status_report_s: float = Field(300.0, gt=0, description="and writes it unchanged this often, in "
                                        "simulated seconds (kubelet's nodeStatusReportFrequency)")
    expect_allocatable: bool = Field(False, description="settled also means oversell answered every sample")
    decision_timeout_s: float = Field(30.0, gt=0, description="a released pod without a decision by then is "
                                                             "counted as undecided")
    batch: int = Field(1, ge=1, description="pods released together before waiting for their decisions")
    autorun: bool = Field(True, description="release the workload's pods by itself (off when a driver does)")
    kube_api_host: str = Field("127.0.0.1", description="where the simulated cluster's API server listens")
    kube_api_port: int = Field(0, ge=0, le=65535, description="its port (0: any free one)")
    data_dir: str = Field(".tidal/simulate", description="where the simulator writes what others read (the "
                          "kubeconfig)")
    kubeconfig: str = Field("", description="written at start: how the bridge and kubectl reach the "
                            "simulated cluster (default: DATA_DIR/kubeconfig)")
    kube_history: int = Field(50_000, ge=100, description="changes the API server keeps for watches to resume "
                              "from (older resourceVersions get 410 Gone, as after etcd compaction)")

    def kubeconfig_path(self) -> str:
        """Where the kubeconfig of the simulated cluster is written at start."""
        return self.kubeconfig or str(Path(self.data_dir) / "kubeconfig")
