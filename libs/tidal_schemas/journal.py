"""What a stage's replica read and did, in the order it did it: its
journal, so a replay can run the same steps at the same times and reach the
same decisions (docs/replay.md).

A step is `(op, t, a, b)`: `t` is the replica's clock when it took the step.
Placement's steps:

| op | a | b | the step |
|---|---|---|---|
| `read` | stream | event id, then a space and the CRC-32 of its bytes when known | an input applied |
| `held` | stream | the event, JSON | an input from a state stream, which keeps only each key's last event: carried whole |
| `elected` | `gained` / `lost` / `gained+lost` | | the leader partition moved |
| `claim` | | | fences due were written |
| `cycle` | | | a scheduling cycle started |
| `took` | decisions | | the cycle's next event was taken (then published) |
| `ended` | | | the cycle ran to its end |
| `binds` | | | binds past their timeout rolled back |
| `stale` | | | nodes checked for stale samples |
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from .common import Name
from .envelope import Payload, register

Step = tuple[str, float, str, str]
MAX_SETTINGS_DEPTH = 32


def _depth(value: Any) -> int:
    """How many containers deep `value` goes (a scalar: 0)."""
    depth, level = 0, [value]
    while True:
        containers = [v for v in level if isinstance(v, (dict, list))]
        if not containers:
            return depth
        depth += 1
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]


@register
class StageJournal(Payload):
    """A run of one replica's steps for one cluster; `seq` counts the
    replica's journal events from 0, so a gap is seen."""

    TYPE = "stage.journal"

    stage: Name = Field(description="the service whose steps these are")
    member: Name = Field(description="the replica (its bus member id), as decisions name their leader")
    seq: int = Field(ge=0)
    steps: list[Step] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict, description="the settings its decisions depend on "
                                     "(on the first event, seq 0): what an unchanged replay runs with")

    @field_validator("settings")
    @classmethod
    def _shallow(cls, settings: dict[str, Any]) -> dict[str, Any]:
        # settings are a few levels deep; one nested past what JSON encoders
        # write back (orjson: 255) would be accepted here and fail to publish
        if _depth(settings) > MAX_SETTINGS_DEPTH:
            raise ValueError(f"nested deeper than {MAX_SETTINGS_DEPTH} levels")
        return settings

    def event_key(self) -> str:
        return f"{self.stage}/{self.member}"
