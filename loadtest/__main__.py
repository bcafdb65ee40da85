"""`python -m loadtest`: its subcommands are loadtest/cli.py's (`slipway` reaches them through slipway/command.py)."""

import signal

from loadtest.cli import main
from slipway.cli import exit_with

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: Locust and MLServer are stopped by PID
    exit_with(main)
