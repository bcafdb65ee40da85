"""`python -m wrappers.frontends FOLDER`: the session host and N front ends of one model (`supervisor`)."""

from slipway.cli import exit_with
from wrappers.frontends.supervisor import main

if __name__ == "__main__":
    exit_with(main)
