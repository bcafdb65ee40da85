"""Prometheus rules from an SLO file: each of its lines becomes an alert on the series the model's pods export.

The limits a release is load-tested on (`make loadtest SLO=`) and a canary is judged on (`canary-judge --slo`)
are the ones production is held to; written a second time by hand into alert rules, they drift. The series
and labels are those deployments/delivery/canary/queries.py reads (the PodMonitor's scrape labels), so an alert sees
what the canary judge sees.

- p50_ms, p95_ms, p99_ms: `histogram_quantile` of the runtime's latency histogram, per predictor.
- max_error_rate: the error budget. Recording rules keep each predictor's error ratio over every window the
  alerts read; the alerts are the SRE workbook's multi-window, multi-burn-rate pairs (the long window says
  enough budget went, the short one that it is still going, so the alert ends soon after the errors do).
  No plain threshold alert: the 1x pair is that threshold, without the flapping of a 5-minute one.
- min_rps: requests answered per second by the whole model (a canary's share alone would always be below
  it), and 0 once the model's series are gone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deployments.delivery.canary.queries import (
    DEFAULT_LATENCY_HISTOGRAM,
    FAILURE_COUNTER,
    MODEL_SERIES_LABEL,
    PREDICTOR_SERIES_LABEL,
    QUANTILES,
)
from deployments.render.autoscaling import REQUEST_COUNTER
from deployments.render.overlay import COMMON_LABELS, RenderError, check_namespace
from deployments.render.seldon import MODEL_LABEL, PREDICTOR_LABEL
from slipway.metric_names import INFERENCE_SECONDS, REQUEST_SECONDS
from slipway.slo import Slo

LINES = (*QUANTILES, "max_error_rate", "min_rps")  # the SLO lines that become rules
LATENCY_WINDOW, LATENCY_FOR = "5m", "10m"
THROUGHPUT_WINDOW, THROUGHPUT_FOR = "5m", "15m"
BUDGET_PERIOD = "30d"  # the error budget the burn rates are relative to
PREDICTOR_LABELS = ("namespace", MODEL_SERIES_LABEL, PREDICTOR_SERIES_LABEL)
MODEL_LABELS = ("namespace", MODEL_SERIES_LABEL)
LATENCY_ALERT = "SlipwayLatencyAboveSLO"
BURN_ALERT = "SlipwayErrorBudgetBurn"
THROUGHPUT_ALERT = "SlipwayThroughputBelowSLO"
_HOURS = {"m": 1 / 60, "h": 1.0, "d": 24.0}
_MODEL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")  # render names the SeldonDeployment after it
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_PREDICTOR = f"{{{{ $labels.{PREDICTOR_SERIES_LABEL} }}}}"  # the alerting series' predictor, as Go's template reads it


class RuleError(ValueError):
    """The rules cannot be made as asked; the message says what to send instead."""


def _hours(window: str) -> float:
    return int(window[:-1]) * _HOURS[window[-1]]


@dataclass(frozen=True)
class BurnRate:
    """One multi-window alert: the budget burns `factor` times faster than it may, over both windows."""

    factor: float
    long: str
    short: str
    severity: str
    hold: str  # the alert's `for`

    @property
    def budget_spent(self) -> float:
        """The share of the whole period's budget gone after `long` at this pace."""
        return self.factor * _hours(self.long) / _hours(BUDGET_PERIOD)


# Google's SRE workbook, "Alerting on SLOs": 2% and 5% of a 30-day budget page, 10% in a day or three a ticket.
BURN_RATES = (
    BurnRate(14.4, "1h", "5m", "page", "2m"),
    BurnRate(6, "6h", "30m", "page", "2m"),
    BurnRate(3, "1d", "2h", "ticket", "15m"),
    BurnRate(1, "3d", "6h", "ticket", "15m"),
)
ERROR_WINDOWS = tuple(sorted({w for burn in BURN_RATES for w in (burn.long, burn.short)}, key=_hours))


def error_ratio_record(window: str) -> str:
    """The recording rule holding each predictor's failed share of answered requests over `window`."""
    return f"slipway_predictor:request_error_ratio:rate{window}"


def _number(value: float) -> str:
    """A limit as PromQL and people read it: 50, 0.001, 12.5 (never rounded)."""
    short = format(value, "g")
    return short if float(short) == value else repr(float(value))


def _sum_rate(metric: str, selector: str, window: str, labels: tuple[str, ...]) -> str:
    return f"sum by ({', '.join(labels)}) (rate({metric}{{{selector}}}[{window}]))"


def _failures_and_answered(selector: str, window: str, labels: tuple[str, ...]) -> tuple[str, str]:
    """(failures/s, requests answered/s) per `labels`. MLServer's counters appear with their first increment, so
    where one has series and the other none, the missing one counts as 0 (`or` the other's rate times 0)."""
    successes = _sum_rate(REQUEST_COUNTER, selector, window, labels)
    failures = _sum_rate(FAILURE_COUNTER, selector, window, labels)
    failed = f"({failures} or {successes} * 0)"
    return failed, f"(({successes} or {failures} * 0) + {failed})"


# engine -> (the kind `kubectl get` names, the route callers reach the model by)
ENGINES = {
    "seldon": ("seldondeployment", "the gateway's route /seldon/{ns}/{model}/"),
    "kserve": ("inferenceservice", "the Service {model}-predictor.{ns} (KServe RawDeployment)"),
}


@dataclass(frozen=True)
class SloRules:
    """The rule groups for one model in one namespace, from the lines of `slo`."""

    slo: Slo
    namespace: str
    model: str
    latency_histogram: str = DEFAULT_LATENCY_HISTOGRAM
    engine: str = "seldon"  # what serves the model (render --engine): only the runbooks' commands differ

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise RuleError(f"engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        try:
            check_namespace(self.namespace)
        except RenderError as err:
            raise RuleError(str(err)) from err
        if not _MODEL_NAME.match(self.model):
            raise RuleError(
                f"model {self.model!r} cannot name a SeldonDeployment: send the model's name as render "
                "pins it (at most 40 lower-case letters, digits and '-', e.g. digits)"
            )
        if not _METRIC_NAME.match(self.latency_histogram):
            raise RuleError(
                f"latency histogram {self.latency_histogram!r} is not a metric name: send one such as {DEFAULT_LATENCY_HISTOGRAM}"
            )
        if self.slo.is_empty():
            raise RuleError(
                f"the SLO has none of the lines alerts are made from ({', '.join(LINES)}): add one, e.g. `p95_ms: 50`"
            )

    @property
    def selector(self) -> str:
        return f'namespace="{self.namespace}",{MODEL_SERIES_LABEL}="{self.model}"'

    @property
    def pods(self) -> str:
        return f"kubectl -n {self.namespace} get pods -l {MODEL_LABEL}={self.model},{PREDICTOR_LABEL}={_PREDICTOR}"

    def groups(self) -> list[dict[str, Any]]:
        """One group: the error-ratio records (only with max_error_rate), then the alerts. Prometheus evaluates a
        group's rules in order, so each burn-rate alert reads the ratios of this evaluation; from a group of their
        own it would read this or the last one, whichever group the scheduler happened to run first."""
        rules = [*self.error_ratio_records(), *self.latency_alerts(), *self.burn_rate_alerts(), *self.throughput_alerts()]
        return [{"name": f"slipway-{self.model}-slo", "rules": rules}]

    def latency_alerts(self) -> list[dict[str, Any]]:
        measured = {
            INFERENCE_SECONDS: "time inside ONNX Runtime per run",
            REQUEST_SECONDS: "each answered request, from its arrival at the server to its answer",
        }.get(self.latency_histogram, f"the histogram {self.latency_histogram}")
        rules = []
        for line, quantile in QUANTILES.items():
            limit = getattr(self.slo, line)
            if limit is None:
                continue
            name = line.removesuffix("_ms")
            rules.append(
                {
                    "alert": LATENCY_ALERT,
                    "expr": (
                        f"histogram_quantile({quantile:g}, sum by (le, {', '.join(PREDICTOR_LABELS)}) "
                        f"(rate({self.latency_histogram}_bucket{{{self.selector}}}[{LATENCY_WINDOW}]))) * 1000 "
                        f"> {_number(limit)}"
                    ),
                    "for": LATENCY_FOR,
                    "labels": {"severity": "page", "slo": line},
                    "annotations": {
                        "summary": f'{self.model}/{_PREDICTOR}: {name} latency {{{{ printf "%.1f" $value }}}} ms, '
                        f"above the SLO's {line}: {_number(limit)}",
                        "description": f"The {name} of {self.latency_histogram} ({measured}) of predictor {_PREDICTOR} "
                        f"of {self.model} in namespace {self.namespace}, over {LATENCY_WINDOW}, has been "
                        f"above {_number(limit)} ms for {LATENCY_FOR}. SLO line: {line}: {_number(limit)}.",
                        "runbook": f"Open the Slipway dashboard for {self.model}: queue time rising with CPU at its limit "
                        "or replicas at the HPA's maximum is too little capacity (raise maxReplicas or the "
                        "CPU request: make recommend); one new version slower than the last: make rollback "
                        f"TAG=<tag>. Pods: {self.pods}",
                    },
                }
            )
        return rules

    def error_ratio_records(self) -> list[dict[str, Any]]:
        if self.slo.max_error_rate is None:
            return []
        records = []
        for window in ERROR_WINDOWS:
            failed, answered = _failures_and_answered(self.selector, window, PREDICTOR_LABELS)
            records.append({"record": error_ratio_record(window), "expr": f"{failed}\n/\n{answered}"})
        return records

    def burn_rate_alerts(self) -> list[dict[str, Any]]:
        budget = self.slo.max_error_rate
        if budget is None:
            return []
        rules = []
        for burn in BURN_RATES:
            threshold = f"({_number(burn.factor)} * {_number(budget)})"
            long, short = (f"{error_ratio_record(w)}{{{self.selector}}} > {threshold}" for w in (burn.long, burn.short))
            rules.append(
                {
                    "alert": BURN_ALERT,
                    "expr": f"{long}\nand\n{short}",
                    "for": burn.hold,
                    "labels": {
                        "severity": burn.severity,
                        "slo": "max_error_rate",
                        "long_window": burn.long,
                        "short_window": burn.short,
                    },
                    "annotations": {
                        "summary": f"{self.model}/{_PREDICTOR}: {{{{ humanizePercentage $value }}}} of requests failed "
                        f"over {burn.long}, burning the error budget {_number(burn.factor)}x too fast",
                        "description": f"Failed requests ({FAILURE_COUNTER} over success + failure) of predictor "
                        f"{_PREDICTOR} of {self.model} in namespace {self.namespace} were "
                        f"{{{{ humanizePercentage $value }}}} of those answered over {burn.long}, and above "
                        f"{_number(burn.factor)} x max_error_rate over {burn.short} too: at this pace "
                        f"{burn.budget_spent:.0%} of the {BUDGET_PERIOD} error budget goes in {burn.long}. "
                        f"SLO line: max_error_rate: {_number(budget)}.",
                        "runbook": f"The errors: kubectl -n {self.namespace} logs -l {MODEL_LABEL}={self.model},"
                        f"{PREDICTOR_LABEL}={_PREDICTOR} -c {self.model} --since={burn.long}. A canary failing: "
                        "take its traffic away (canary-judge says why); one new version failing: make rollback "
                        "TAG=<tag>; every version failing: look at what the callers send.",
                    },
                }
            )
        return rules

    def throughput_alerts(self) -> list[dict[str, Any]]:
        limit = self.slo.min_rps
        if limit is None:
            return []
        _, answered = _failures_and_answered(self.selector, THROUGHPUT_WINDOW, MODEL_LABELS)
        kind, route = ENGINES[self.engine]
        # no series of either counter for the model at all (no pod scraped): 0 requests/s, with the model's labels
        gone = (
            f"absent_over_time({REQUEST_COUNTER}{{{self.selector}}}[{THROUGHPUT_WINDOW}]) * 0 and "
            f"absent_over_time({FAILURE_COUNTER}{{{self.selector}}}[{THROUGHPUT_WINDOW}])"
        )
        return [
            {
                "alert": THROUGHPUT_ALERT,
                "expr": f"(\n  {answered}\nor\n  {gone}\n) < {_number(limit)}",
                "for": THROUGHPUT_FOR,
                "labels": {"severity": "ticket", "slo": "min_rps"},
                "annotations": {
                    "summary": f'{self.model}: {{{{ printf "%.2f" $value }}}} requests/s answered, below the SLO\'s '
                    f"min_rps: {_number(limit)}",
                    "description": f"Requests answered (success + failure, every predictor) by {self.model} in namespace "
                    f"{self.namespace} over {THROUGHPUT_WINDOW} have been below {_number(limit)}/s for "
                    f"{THROUGHPUT_FOR} (0: no pod of it is scraped). SLO line: min_rps: {_number(limit)}.",
                    "runbook": f"kubectl -n {self.namespace} get {kind} {self.model}, and its pods: Ready, and scraped "
                    f"(PodMonitor {self.model}-mlserver)? Then {route.format(ns=self.namespace, model=self.model)} "
                    "and whether the callers moved elsewhere.",
                },
            }
        ]


def prometheus_rule(rules: SloRules, *, slo_file: str | None = None) -> dict[str, Any]:
    """The monitoring.coreos.com/v1 PrometheusRule holding `rules`, labelled as render labels the model's resources."""
    metadata: dict[str, Any] = {
        "name": f"{rules.model}-slo",
        "namespace": rules.namespace,
        "labels": {**COMMON_LABELS, "app.kubernetes.io/name": rules.model, MODEL_LABEL: rules.model},
    }
    if slo_file:
        metadata["annotations"] = {"slipway.io/slo-file": slo_file}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": rules.groups()},
    }
