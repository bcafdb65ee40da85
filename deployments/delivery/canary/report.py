"""Every decision of a canary run: `reports/canary.json` (rewritten after each event, so a killed run leaves what
it did), a PNG of the weights and latency over time beside it, and the table the command shows live."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from deployments.delivery.canary.drift import DriftVerdict
from deployments.delivery.canary.judge import Verdict
from deployments.delivery.canary.state import CanaryState
from slipway.paths import REPORTS_DIR
from slipway.reports import read_report, write_report

REPORT = "canary"
_HEAD = ("namespace", "deployment", "version", "stable_version", "steps", "started_at", "outcome", "reason")
_COLOURS = {"promote-step": "green", "wait": "yellow", "fail": "red", "holds": "green", "unmeasured": "yellow"}


@dataclass
class DecisionLog:
    """The run's events, written through to the report; `on_change` redraws whatever shows them."""

    reports_dir: Path = REPORTS_DIR
    on_change: Callable[[], None] = lambda: None
    clock: Callable[[], float] = time.time
    head: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def begin(self, state: CanaryState, live) -> None:
        self.head = dict(
            zip(
                _HEAD, (live.namespace, live.name, state.version, state.stable_version, state.steps, state.started_at, None, None)
            )
        )
        self.events = [*self.events, {"at": state.started_at, "kind": "begin", "weights": {"default": 100, "canary": 0}}]
        self._changed()

    def resume(self, state: CanaryState, live) -> None:
        """Carry on the report of the run this one resumes, where it is that run's."""
        previous = read_report(REPORT, self.reports_dir) or {}
        same = all(
            previous.get(key) == value
            for key, value in (
                ("namespace", live.namespace),
                ("deployment", live.name),
                ("version", state.version),
                ("started_at", state.started_at),
            )
        )
        if same:
            self.head = {key: previous.get(key) for key in _HEAD}
            self.events = list(previous.get("events", []))
        else:
            self.begin(state, live)
        self.events.append({"at": self.clock(), "kind": "resume", "phase": state.phase, "step": state.step})
        self._changed()

    def drift(self, verdict: DriftVerdict) -> None:
        self.events.append({"at": self.clock(), "kind": "drift", **verdict.as_dict()})
        self._changed()

    def decision(self, state: CanaryState, verdict: Verdict) -> None:
        self.events.append(
            {"at": verdict.at, "kind": "decision", "step": state.step, "weight": state.weight, **verdict.as_dict()}
        )
        self._changed()

    def weights(self, state: CanaryState, split: dict[str, int]) -> None:
        self.events.append(
            {"at": self.clock(), "kind": "weights", "phase": state.phase, "step": state.step, "weights": dict(split)}
        )
        self._changed()

    def tag_moved(self, move: dict) -> None:
        self.events.append({**move, "at": self.clock(), "kind": "tag"})  # the store's own time of the move aside
        self._changed()

    def end(self, outcome: str, reason: str | None) -> None:
        self.head.update(outcome=outcome, reason=reason)
        self.events.append({"at": self.clock(), "kind": "end", "outcome": outcome, "reason": reason})
        self._changed()
        self.plot()

    def _changed(self) -> None:
        write_report(REPORT, {**self.head, "events": self.events}, self.reports_dir)
        self.on_change()

    # ------------------------------------------------------------------ showing it

    def table(self) -> Table:
        table = Table(title=f"canary {self.head.get('deployment', '')} v{self.head.get('version', '')}", expand=False)
        for column in ("time", "step", "weights", "canary p95", "stable p95", "canary err", "decision", "why"):
            table.add_column(column, overflow="fold")
        weights = "100/0"
        for event in self.events:
            stamp = time.strftime("%H:%M:%S", time.localtime(event["at"]))
            if event["kind"] in ("begin", "weights"):
                weights = f"{event['weights']['default']}/{event['weights']['canary']}"
            if event["kind"] == "decision":
                canary, stable = event["canary"], event["stable"]
                colour = _COLOURS[event["decision"]]
                table.add_row(
                    stamp,
                    str(event["step"] + 1),
                    weights,
                    _ms(canary["latency_ms"].get("p95_ms")),
                    _ms(stable["latency_ms"].get("p95_ms")),
                    _rate(canary.get("error_rate")),
                    f"[{colour}]{event['decision']}[/]",
                    "; ".join(event["lines"]),
                )
            elif event["kind"] == "drift":
                table.add_row(
                    stamp,
                    "shadow",
                    "-",
                    "",
                    "",
                    "",
                    f"[{_COLOURS.get(event['decision'], 'red')}]drift {event['decision']}[/]",
                    event["line"],
                )
            elif event["kind"] in ("tag", "end", "resume"):
                what = {
                    "tag": lambda: f"{event['model']}@{event['tag']} -> v{event['version']}",
                    "end": lambda: f"{event['outcome']}{': ' + event['reason'] if event['reason'] else ''}",
                    "resume": lambda: f"resumed ({event['phase']})",
                }[event["kind"]]()
                table.add_row(stamp, "", weights, "", "", "", event["kind"], what)
        return table

    def plot(self) -> Path | None:
        """Canary weight and p95 latency of both predictors over the run, as `reports/canary.png`."""
        from slipway.plots import pyplot, save_png

        try:
            plt = pyplot()
        except ImportError:  # matplotlib comes with the loadtest and export extras, not with deploy alone
            return None
        start = self.head.get("started_at") or (self.events[0]["at"] if self.events else 0.0)
        figure, (weight_axis, latency_axis) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        times, weights = [], []
        for event in self.events:
            if event["kind"] in ("begin", "weights"):
                times.append((event["at"] - start) / 60)
                weights.append(event["weights"]["canary"])
        if times:
            weight_axis.step(
                times + [(self.events[-1]["at"] - start) / 60], weights + weights[-1:], where="post", label="canary weight"
            )
        weight_axis.set_ylabel("canary traffic (%)")
        weight_axis.set_ylim(-5, 105)
        decisions = [event for event in self.events if event["kind"] == "decision"]
        for side, style in (("canary", "o-"), ("stable", "s--")):
            points = [((event["at"] - start) / 60, event[side]["latency_ms"].get("p95_ms")) for event in decisions]
            points = [(x, y) for x, y in points if y is not None]
            if points:
                latency_axis.plot(*zip(*points), style, label=f"{side} p95")
        for event in decisions:
            latency_axis.axvline(
                (event["at"] - start) / 60, color=_COLOURS[event["decision"]].replace("yellow", "orange"), alpha=0.3
            )
        latency_axis.set_ylabel("p95 latency (ms)")
        latency_axis.set_xlabel("minutes since the canary started")
        for axis in (weight_axis, latency_axis):
            if axis.get_legend_handles_labels()[0]:
                axis.legend(loc="best")
        outcome = self.head.get("outcome") or "in progress"
        weight_axis.set_title(f"canary {self.head.get('deployment')} v{self.head.get('version')}: {outcome}")
        path = Path(self.reports_dir) / f"{REPORT}.png"
        save_png(figure, path)
        return path


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.2f} ms"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.2%}"
