"""The canary controller: step a new version's share of traffic up while it holds the SLO, then promote it, or
roll it back at the first broken line.

A run is resumable at every point: what it has done is in the state annotation (deployments/delivery/canary/state.py),
every change is one guarded JSON patch (deployments/delivery/canary/live.py), and each phase first looks at what the
cluster already shows before acting, so a second run after a kill repeats nothing and skips nothing.

    stepping     canary at steps[i]%; every interval: judge -> next step | wait (too few samples) | roll back
    promoting    0/100, the stable predictor re-pointed at the new version and rolled out, the store's tag
                 moved, 100/0, the canary removed
    rolling-back 100/0, the canary removed; the tag stays; the broken SLO line is the command's error

The last step (100) is the promotion itself: with no traffic left on the stable predictor there is nothing to
compare against, so the canary is judged for the last time at the step before.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

from deployments.delivery.canary import live, predictors
from deployments.delivery.canary.drift import DriftVerdict
from deployments.delivery.canary.judge import Verdict
from deployments.delivery.canary.live import LiveDeployment, LiveError, annotation_path, predictor_index
from deployments.delivery.canary.report import DecisionLog
from deployments.delivery.canary.state import LAST_ANNOTATION, SHADOW_ANNOTATION, STATE_ANNOTATION, CanaryState, Holder
from deployments.render.overlay import CANARY_PREDICTOR
from deployments.render.records import ModelVersion

STABLE, SHADOW = predictors.STABLE_PREDICTOR, predictors.SHADOW_PREDICTOR
DEFAULT_STEPS = (5, 10, 25, 50, 100)


class CanaryRefused(Exception):
    """The canary cannot start or resume as asked (another one runs, the version serves already...): nothing changed."""


# how long a predictor whose pods just became Ready stays at 0% (`_settle`): kube-proxy syncs at most once a second
# by default, and later on a busy node
SETTLE_S = 5.0


class RolledBack(Exception):
    """The canary was rolled back; the message names the SLO line (or what else) that failed."""


@dataclass(frozen=True)
class Plan:
    """What the user asked for."""

    version: ModelVersion | None  # None for an abort
    steps: tuple[int, ...]
    interval_s: float
    promote_tag: str
    max_waits: int = 6
    drain_s: float = 10.0
    settle_s: float = SETTLE_S
    lease_s: float = 60.0


def check_steps(steps: list[int]) -> tuple[int, ...]:
    """Weights strictly rising within 1..100, ending at 100 (the promotion, judged at the step before it)."""
    if len(steps) < 2 or any(not 1 <= step <= 100 for step in steps) or steps != sorted(set(steps)) or steps[-1] != 100:
        raise ValueError(
            f"steps {','.join(map(str, steps))} must be canary weights in percent, rising, each 1-100, "
            "at least one judged step before the last, 100 (e.g. 5,10,25,50,100)"
        )
    return tuple(steps)


@dataclass
class Controller:
    """Drives one canary on one SeldonDeployment. `judge` and `judge_drift` read Prometheus; `place` uploads the
    version; `wait_rolled_out(digests, on_poll)` waits for predictors to serve digests; `move_tag()` moves the tag."""

    live: LiveDeployment
    plan: Plan
    log: DecisionLog
    judge: Callable[[], Verdict]
    judge_drift: Callable[[], DriftVerdict]
    place: Callable[[], None]
    wait_rolled_out: Callable[[dict[str, str], Callable[[], None]], None]
    move_tag: Callable[[], dict]
    say: Callable[[str], None] = print
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self.me = Holder.this_process()
        self.current: CanaryState | None = None  # None until the canary is started or read
        self._text = ""  # the state annotation as this run last wrote or read it: every patch tests it

    @property
    def state(self) -> CanaryState:
        if self.current is None:
            raise AssertionError("the canary's state is read or written before anything uses it")
        return self.current

    @property
    def version(self) -> ModelVersion:
        if self.plan.version is None:
            raise AssertionError("starting or resuming a canary needs the version (only an abort goes without)")
        return self.plan.version

    # ------------------------------------------------------------------ entry

    def run(self) -> str:
        """Start or resume the canary and drive it to its end: "promoted", or RolledBack."""
        sdep = self.live.read()
        text = (sdep["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
        if text is None:
            self._start(sdep)
        else:
            self._resume(CanaryState.decode(text, where=f"{self.live.namespace}/{self.live.name}"), text)
        while self.state.phase == "stepping":
            self._step()
        if self.state.phase == "rolling-back":
            self._roll_back()
        return self._promote()

    def abort(self, who: str) -> None:
        """Roll back the canary in progress now, whoever drives it (their next write fails its test and stops them)."""
        sdep = self.live.read()
        text = (sdep["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
        if text is None:
            raise CanaryRefused(f"no canary is in progress on {self.where}: nothing to abort")
        self.current, self._text = CanaryState.decode(text, where=f"{self.live.namespace}/{self.live.name}"), text
        self.log.resume(self.state, self.live)
        self._write(holder=self.me, phase="rolling-back", reason=f"aborted by {who}")
        self._roll_back()

    def _start(self, sdep: dict) -> None:
        version = self.version
        names = [p["name"] for p in sdep["spec"]["predictors"]]
        if STABLE not in names:
            raise CanaryRefused(
                f"{self.where} has no predictor {STABLE!r} to compare a canary with; deploy one version with make deploy first"
            )
        if CANARY_PREDICTOR in names:
            raise CanaryRefused(
                f"{self.where} already has a predictor {CANARY_PREDICTOR!r} but no canary state (was it "
                f"rendered with OVERLAY=canary?): deploy a single version, then run the canary"
            )
        stable = sdep["spec"]["predictors"][names.index(STABLE)]
        stable_version, stable_digest = predictors.served_version(stable)
        if stable_digest == version.digest:
            raise CanaryRefused(
                f"{self.where} already serves {version.name} v{version.version} ({version.digest[:19]}...)"
                f" on predictor {STABLE!r}: nothing to canary"
            )
        shadow_version = self._shadow_version(sdep)
        if shadow_version is not None and shadow_version != version.version:
            raise CanaryRefused(
                f"a shadow of v{shadow_version} runs on {self.where}: canary that version, or remove "
                f"the shadow first (make shadow-off)"
            )
        self.place()
        now = self.clock()
        self.current = CanaryState(
            version=version.version,
            digest=version.digest,
            uri=version.uri,
            stable_version=stable_version,
            stable_digest=stable_digest,
            steps=list(self.plan.steps),
            step=0,
            holder=self.me,
            lease_s=self.plan.lease_s,
            renewed_at=now,
            started_at=now,
            step_started_at=now,
        )
        self.log.begin(self.state, self.live)
        if shadow_version is not None:
            self._check_drift()
            sdep = self.live.read()
        # at 0% until its pods serve (`_step`): an ingress sends a predictor its share whether or not its Service has
        # a Ready endpoint, and the canary's pods take a while (its bytes pulled, the runtime loaded, the probe)
        operations = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": sdep["metadata"]["resourceVersion"]},
            *live.at_index(sdep, STABLE),
            *live.weights(sdep, {STABLE: 100}),
            {
                "op": "add",
                "path": "/spec/predictors/-",
                "value": {**predictors.canary(stable, version, namespace=self.live.namespace), "traffic": 0},
            },
            {"op": "add", "path": annotation_path(STATE_ANNOTATION), "value": self.state.encode()},
        ]
        if shadow_version is not None:  # appending the canary left the shadow's index where it was
            index = predictor_index(sdep, SHADOW)
            operations += [
                *live.at_index(sdep, SHADOW),
                {"op": "remove", "path": f"/spec/predictors/{index}"},
                {"op": "remove", "path": annotation_path(SHADOW_ANNOTATION)},
            ]
        self.live.patch(operations)
        self._text = self.state.encode()
        self.say(f"canary {version.name} v{version.version} added beside v{stable_version}, at 0% until its pods serve")

    def _resume(self, state: CanaryState, text: str) -> None:
        if (state.version, state.digest) != (self.version.version, self.version.digest):
            raise CanaryRefused(
                f"a canary of v{state.version} is in progress on {self.where} ({state.position()}, "
                f"{state.phase}): finish it with make canary VERSION={state.version}, or abort it "
                f"with make canary-abort, before a canary of v{self.version.version}"
            )
        held = state.held_elsewhere(self.me, self.clock())
        if held:
            raise CanaryRefused(
                f"a canary of v{state.version} is running on {self.where} ({state.position()}), {held}: "
                f"wait for it, or stop it and run this again to resume"
            )
        if list(self.plan.steps) != state.steps:
            self.say(f"resuming with the steps it started with, {','.join(map(str, state.steps))}")
        previous = state.holder
        self.current, self._text = state, text
        self._write(holder=self.me)
        self.log.resume(self.state, self.live)
        self.say(
            f"resuming the canary of v{state.version} at {state.position()}, {state.phase} "
            f"(its controller, {previous.describe()}, stopped)"
        )

    # ------------------------------------------------------------------ stepping

    def _step(self) -> None:
        self.wait_rolled_out({STABLE: self.state.stable_digest, CANARY_PREDICTOR: self.state.digest}, self._renew)
        split = {STABLE: 100 - self.state.weight, CANARY_PREDICTOR: self.state.weight}
        traffic = self._traffic(self.live.read())
        if traffic != split:  # the canary's pods serve now: it takes its share, the step begins
            if not traffic.get(CANARY_PREDICTOR):
                self._settle()
            self._set_weights(split, step_started_at=self.clock())
            self.say(f"canary serves: {self.state.position()}")
        state = self.state
        self._pause(
            max(0.0, state.step_started_at + self.plan.interval_s - self.clock()) if state.waits == 0 else self.plan.interval_s
        )
        verdict = self.judge()
        self.log.decision(self.state, verdict)
        if verdict.decision == "fail":
            self._start_roll_back("; ".join(verdict.lines()))
        elif verdict.decision == "wait":
            if self.state.waits + 1 > self.plan.max_waits:
                self._start_roll_back(f"too few samples {self.plan.max_waits + 1} times in a row: {verdict.waiting_for}")
            else:
                self._write(waits=self.state.waits + 1)
        elif self.state.step + 1 >= len(self.state.steps) - 1:
            self._set_weights(
                {STABLE: 0, CANARY_PREDICTOR: 100},
                phase="promoting",
                step=len(self.state.steps) - 1,
                waits=0,
                step_started_at=self.clock(),
            )
        else:
            step = self.state.step + 1
            weight = self.state.steps[step]
            self._set_weights({STABLE: 100 - weight, CANARY_PREDICTOR: weight}, step=step, waits=0, step_started_at=self.clock())
            self.say(f"canary holds: {self.state.position()}")

    def _check_drift(self) -> None:
        """Before the canary takes traffic: the shadow's answers against the stable's on the same requests."""
        for attempt in range(self.plan.max_waits + 1):
            verdict = self.judge_drift()
            self.log.drift(verdict)
            self.say(verdict.line)
            if verdict.decision in ("holds", "unmeasured"):
                return
            if verdict.decision == "fail":
                break
            if attempt < self.plan.max_waits:
                self.sleep(self.plan.interval_s)
        self._remove_shadow()
        reason = verdict.line if verdict.decision == "fail" else f"too few mirrored rows to judge output drift: {verdict.line}"
        self.log.end("rolled-back", reason)
        raise RolledBack(reason)

    def _remove_shadow(self) -> None:
        sdep = self.live.read()
        index = predictor_index(sdep, SHADOW)
        self.live.patch(
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": sdep["metadata"]["resourceVersion"]},
                *live.at_index(sdep, SHADOW),
                {"op": "remove", "path": f"/spec/predictors/{index}"},
                {"op": "remove", "path": annotation_path(SHADOW_ANNOTATION)},
            ]
        )
        self.say(f"shadow removed from {self.where}")

    # ------------------------------------------------------------------ endings

    def _start_roll_back(self, reason: str) -> None:
        self._set_weights({STABLE: 100, CANARY_PREDICTOR: 0}, phase="rolling-back", reason=reason)

    def _roll_back(self) -> None:
        sdep = self.live.read()
        self.say(f"rolling back v{self.state.version}: weights 100/0")
        if predictor_index(sdep, CANARY_PREDICTOR) is not None:
            if self._traffic(sdep) != {STABLE: 100, CANARY_PREDICTOR: 0}:
                self._set_weights({STABLE: 100, CANARY_PREDICTOR: 0})
            self._pause(self.plan.drain_s)
        self._finish("rolled-back")
        raise RolledBack(self.state.reason or "rolled back")

    def _promote(self) -> str:
        version = self.version
        sdep = self.live.read()
        if predictor_index(sdep, CANARY_PREDICTOR) is not None:
            stable = sdep["spec"]["predictors"][predictor_index(sdep, STABLE)]
            if predictors.served_version(stable)[1] != self.state.digest:
                if self._traffic(sdep) != {STABLE: 0, CANARY_PREDICTOR: 100}:
                    self._set_weights({STABLE: 0, CANARY_PREDICTOR: 100})
                self._repoint_stable()
            self.wait_rolled_out({STABLE: self.state.digest, CANARY_PREDICTOR: self.state.digest}, self._renew)
            move = self.move_tag()
            self.log.tag_moved(move)
            self.say(
                f"store: {version.name}@{self.plan.promote_tag} -> v{self.state.version}"
                f"{'' if move.get('changed', True) else ' (already there)'}"
            )
            self._settle()  # the stable's pods are new: they carry nothing until every node routes to them
            self._set_weights({STABLE: 100, CANARY_PREDICTOR: 0})
            self._pause(self.plan.drain_s)
        self._finish("promoted")
        return "promoted"

    def _repoint_stable(self) -> None:
        """The stable predictor, still at 0%, made to serve the new version (its pods roll while it carries nothing)."""
        sdep = self.live.read()
        index = predictor_index(sdep, STABLE)
        stable = copy.deepcopy(sdep["spec"]["predictors"][index])
        from deployments.render.overlay import pin_predictor

        pin_predictor(stable, self.version, namespace=self.live.namespace)
        stable["traffic"] = 0
        self._patch(
            [
                *live.at_index(sdep, STABLE),
                {"op": "replace", "path": f"/spec/predictors/{index}", "value": stable},
                {"op": "add", "path": annotation_path(predictors.VERSION_ANNOTATION), "value": self.state.version},
                {"op": "add", "path": annotation_path(predictors.DIGEST_ANNOTATION), "value": self.state.digest},
            ],
        )
        self.say(f"predictor {STABLE!r} re-pointed at v{self.state.version}, rolling out at 0%")

    def _finish(self, outcome: str) -> None:
        """Remove the canary predictor and the state, leaving how it ended (one patch)."""
        import json

        sdep = self.live.read()
        last = json.dumps(
            {"version": self.state.version, "outcome": outcome, "reason": self.state.reason, "at": self.clock()},
            separators=(",", ":"),
        )
        operations = []
        index = predictor_index(sdep, CANARY_PREDICTOR)
        if index is not None:
            operations += [*live.at_index(sdep, CANARY_PREDICTOR), {"op": "remove", "path": f"/spec/predictors/{index}"}]
            operations += live.weights(
                {"spec": {"predictors": [p for p in sdep["spec"]["predictors"] if p["name"] != CANARY_PREDICTOR]}}, {STABLE: 100}
            )
        operations += [
            {"op": "remove", "path": annotation_path(STATE_ANNOTATION)},
            {"op": "add", "path": annotation_path(LAST_ANNOTATION), "value": last},
        ]
        self._patch(operations, final=True)
        self.log.end(outcome, self.state.reason)
        self.say(
            f"{outcome}: {self.where} serves v{self.state.version if outcome == 'promoted' else self.state.stable_version} alone"
        )

    # ------------------------------------------------------------------ writing the state

    @property
    def where(self) -> str:
        return f"SeldonDeployment {self.live.namespace}/{self.live.name}"

    def _traffic(self, sdep: dict) -> dict[str, int]:
        return {p["name"]: p.get("traffic", 0) for p in sdep["spec"]["predictors"] if not p.get("shadow")}

    def _shadow_version(self, sdep: dict) -> str | None:
        index = predictor_index(sdep, SHADOW)
        if index is None:
            return None
        return predictors.served_version(sdep["spec"]["predictors"][index])[0]

    def _set_weights(self, split: dict[str, int], **changes) -> None:
        """Both weights, summing to 100, and the state that goes with them, in one patch."""
        assert sum(split.values()) == 100, split
        sdep = self.live.read()
        self._patch([*live.at_index(sdep, *split), *live.weights(sdep, split)], **changes)
        self.log.weights(self.state, split)

    def _write(self, **changes) -> None:
        self._patch([], **changes)

    def _renew(self) -> None:
        if self.clock() - self.state.renewed_at >= self.state.lease_s / 3:
            self._write()

    def _patch(self, operations: list[dict], *, final: bool = False, **changes) -> None:
        """`operations` with the state updated by `changes` and a renewed lease (`final`: the operations remove the
        state), guarded by the state text this run last wrote or read."""
        updated = self.state.model_copy(update={"renewed_at": self.clock(), **changes})
        guard = [{"op": "test", "path": annotation_path(STATE_ANNOTATION), "value": self._text}]
        tail = [] if final else [{"op": "replace", "path": annotation_path(STATE_ANNOTATION), "value": updated.encode()}]
        try:
            self.live.patch([*guard, *operations, *tail])
        except live.Conflict as err:
            raise LiveError(
                f"{err}: another controller (or a person) changed the canary; this run stops, "
                f"nothing more is changed. Run it again to resume from what the cluster shows"
            ) from err
        self.current, self._text = updated, updated.encode()

    def _settle(self) -> None:
        """Hold a predictor whose pods just became Ready at 0% for `settle_s`: their Service's Endpoints list them,
        but each node's kube-proxy programs that change only on its next sync, and until then a connection to the
        Service's address is refused (docs/deploying.md)."""
        self._pause(self.plan.settle_s)

    def _pause(self, seconds: float) -> None:
        """Sleep `seconds`, renewing the lease often enough that no second run takes over."""
        end = self.clock() + seconds
        while (left := end - self.clock()) > 0:
            self.sleep(min(left, self.state.lease_s / 3))
            self._renew()
