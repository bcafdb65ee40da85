"""`python -m deployments alerts`: the SLO file's lines as Prometheus alerts for one model, written to --out.

Two files, the same rules: `prometheusrule-<model>-slo.yaml` for the Prometheus operator (kubectl apply it
where its ruleSelector finds it) and `rules-<model>-slo.yaml`, a plain rule file for a Prometheus's
`rule_files:` and for `promtool check rules`. Each is written whole or not at all.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from deployments.render.overlay import namespace_argument
from deployments.rollout.deployed import ModelNotFound, deployed_model
from slipway import atomic
from slipway.cli import UserError, console
from slipway.cluster_names import DEFAULT_NAMESPACE
from slipway.paths import BUILD_DIR


class _Dumper(yaml.SafeDumper):
    """Multi-line PromQL as YAML block text, the way people write rule files."""


_Dumper.add_representer(
    str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)
)

HEADER = (
    "# Rendered from the SLO file's lines by `python -m deployments alerts --slo {slo} --namespace {namespace} "
    "--model {model}`\n# (make alerts): edit the SLO file and render again rather than editing this file.\n"
)


def add_command(commands) -> None:
    from deployments.delivery.canary.queries import DEFAULT_LATENCY_HISTOGRAM

    parser = commands.add_parser(
        "alerts",
        help="render Prometheus alerts (a PrometheusRule) from an SLO file's lines",
        description="Render the SLO file's latency (p50_ms, p95_ms, p99_ms), error-rate (max_error_rate: multi-window "
        "burn-rate alerts on the error budget) and throughput (min_rps) lines as Prometheus rules for one "
        "model, over the series its PodMonitor scrapes.",
    )
    parser.add_argument("--slo", required=True, type=Path, help="the SLO file `make loadtest SLO=` takes")
    parser.add_argument(
        "--namespace",
        type=namespace_argument,
        default=DEFAULT_NAMESPACE,
        help=f"where the model runs (default {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--model",
        help="the model (render names its SeldonDeployment after it; default: the one model Slipway deployed with "
        "--engine in the namespace, found by its labels on the current kubectl context's cluster)",
    )
    parser.add_argument(
        "--engine",
        default="seldon",
        choices=("seldon", "kserve"),
        help="what serves the model (render --engine; default seldon): the runbooks name its objects",
    )
    parser.add_argument(
        "--latency-histogram",
        default=DEFAULT_LATENCY_HISTOGRAM,
        help=f"the histogram latency lines are read from (default {DEFAULT_LATENCY_HISTOGRAM})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=BUILD_DIR / "manifests" / "alerts",
        help="the folder the two rule files are written to (default build/manifests/alerts)",
    )
    parser.set_defaults(func=cmd_alerts)


def cmd_alerts(args) -> int:
    from deployments.delivery.alerts.rules import LINES, RuleError, SloRules, prometheus_rule
    from slipway.slo import ConfigError, load_slo

    out = Path(args.out)
    try:
        slo = load_slo(args.slo)
        if slo.is_empty():
            raise UserError(
                f"SLO file {args.slo} has none of the lines alerts are made from ({', '.join(LINES)}): add one, e.g. `p95_ms: 50`"
            )
        blocker = out if out.exists() and not out.is_dir() else atomic.file_in_the_way(out)
        if blocker is not None:
            raise UserError(f"{blocker} is a file, so {out} cannot be a folder: choose another --out, nothing was written")
        model = args.model or deployed_model(
            args.namespace,
            flag="--model",
            target="alerts",
            engines=(args.engine,),
            on_note=lambda note: console.print(note, soft_wrap=True, markup=False),
        )
        rules = SloRules(slo, namespace=args.namespace, model=model, latency_histogram=args.latency_histogram, engine=args.engine)
    except (ConfigError, RuleError, ModelNotFound) as err:
        raise UserError(str(err)) from err
    header = HEADER.format(slo=args.slo, namespace=args.namespace, model=model)
    rule = prometheus_rule(rules, slo_file=str(args.slo))
    files = {out / f"prometheusrule-{model}-slo.yaml": rule, out / f"rules-{model}-slo.yaml": rule["spec"]}
    for path, content in files.items():
        atomic.write_text(path, header + yaml.dump(content, Dumper=_Dumper, sort_keys=False, width=1_000_000))
    every = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    alerts = sum(1 for r in every if "alert" in r)
    lines = [line for line in LINES if getattr(slo, line) is not None]
    console.print(
        f"{alerts} alerts and {len(every) - alerts} recording rules for {model} in namespace "
        f"{args.namespace} from {', '.join(lines)} -> "
        f"{', '.join(str(path) for path in files)}",
        soft_wrap=True,
    )
    return 0
