"""`python -m deployments canary-judge`: one decision on a canary, from $PROMETHEUS_URL and an SLO file.

Exit status: 0 promote-step, 1 fail (the SLO lines it broke on stderr), 3 wait (too few samples), 2 a user error.
"""

from __future__ import annotations

EXIT_STATUS = {"promote-step": 0, "fail": 1, "wait": 3}


def add_command(commands) -> None:
    from deployments.canary.judge import DEFAULT_WINDOW
    from deployments.canary.queries import DEFAULT_LATENCY_HISTOGRAM
    from deployments.render import CANARY_PREDICTOR

    parser = commands.add_parser(
        "canary-judge", help="judge a canary predictor against its stable one and the SLO, from Prometheus",
        description=__doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].strip(),
    )
    parser.add_argument("--slo", required=True, help="the SLO file `make loadtest SLO=` takes (its `canary:` section "
                        "sets the tolerances and min_requests)")
    parser.add_argument("--prometheus-url", help="default: $PROMETHEUS_URL; credentials from $PROMETHEUS_TOKEN (bearer) "
                        "or $PROMETHEUS_USERNAME and $PROMETHEUS_PASSWORD (basic auth)")
    parser.add_argument("--namespace", default="slipway", help="where the model runs (default slipway)")
    parser.add_argument("--deployment", default="digits", help="the SeldonDeployment (render names it after the model)")
    parser.add_argument("--stable", default="default", help="the stable predictor (default: default)")
    parser.add_argument("--canary", default=CANARY_PREDICTOR, help=f"the canary predictor (default: {CANARY_PREDICTOR})")
    parser.add_argument("--window", default=DEFAULT_WINDOW, help=f"trailing window judged (default {DEFAULT_WINDOW})")
    parser.add_argument("--at", type=float, help="judge the window ending at this Unix time (default now)")
    parser.add_argument("--latency-histogram", default=DEFAULT_LATENCY_HISTOGRAM,
                        help=f"the histogram latency is read from (default {DEFAULT_LATENCY_HISTOGRAM})")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    parser.set_defaults(func=cmd_canary_judge)


def cmd_canary_judge(args) -> int:
    import json
    import sys
    from pathlib import Path

    from deployments.canary.judge import judge
    from deployments.prometheus import Prometheus, PrometheusError
    from loadtest.config import ConfigError
    from loadtest.slo import load_slo
    from slipway.cli import UserError, console

    try:
        slo = load_slo(Path(args.slo))
        server = Prometheus.from_env(args.prometheus_url)
        verdict = judge(server, slo, namespace=args.namespace, deployment=args.deployment, stable=args.stable,
                        canary=args.canary, window=args.window, at=args.at, latency_histogram=args.latency_histogram)
    except (ConfigError, PrometheusError, ValueError) as err:
        raise UserError(str(err)) from err
    if args.json:
        sys.stdout.write(json.dumps(verdict.as_dict(), indent=2) + "\n")
    colour = {"promote-step": "green", "wait": "yellow", "fail": "red"}[verdict.decision]
    console.print(f"[{colour}]{verdict.decision}[/]")
    for line in verdict.lines():
        console.print(f"  {line}", markup=False)
    return EXIT_STATUS[verdict.decision]
