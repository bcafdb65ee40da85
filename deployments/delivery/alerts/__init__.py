"""Alerts from the SLO file: a PrometheusRule whose rules are the file's lines, with multi-window burn-rate
alerts for the error budget (rules), and the `alerts` subcommand that renders it (command)."""
