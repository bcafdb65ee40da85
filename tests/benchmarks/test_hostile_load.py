"""`python -m benchmarks hostile-load`: its bookkeeping and its plot, without a server (the servers it measures are
the ones tests/wrappers/test_hostile_load.py starts)."""

from __future__ import annotations

import pytest

from benchmarks.hostile_load import Outcomes, Tier, merged, plot
from slipway.cli import UserError


def test_a_lost_request_is_counted_with_how_it_ended():
    outcomes = Outcomes()
    outcomes.add("rest", "answered")
    outcomes.add("rest", "lost", "ConnectionResetError")
    outcomes.add("grpc", "refused")
    assert outcomes.counts == {"rest": {"answered": 1, "refused": 0, "lost": 1}, "grpc": {"answered": 0, "refused": 1, "lost": 0}}
    assert outcomes.lost_as == {"rest: ConnectionResetError": 1}


def test_the_plot_is_written(tmp_path):
    server = {
        "rss": {"bytes_held_per_byte_sent": 3.5},
        "rss_int64": {"bytes_held_per_byte_sent": 4.5},
        "rss_bytes": {"bytes_held_per_byte_sent": 6.5},
        "small_requests": {"during_the_large_body": {"p99_ms": 200.0}},
        "slowloris": {"held_by_the_server": 0},
        "unknown_models": {"series_after": 200},
        "malformed": {"rest_log_bytes_per_request": 0.0, "grpc_log_bytes_per_request": 26.0},
        "sigterm": {"lost": {"rest": 0, "grpc": 6}},
    }
    payload = {"tier": Tier().__dict__, "servers": {"slipway": server, "plain_mlserver": server}, "rss_at": {}}
    plot(payload, tmp_path / "hostile-load.png")
    assert (tmp_path / "hostile-load.png").read_bytes().startswith(b"\x89PNG")


def test_a_memory_only_run_updates_the_memory_probes_of_the_last_report_and_says_so():
    tier = Tier().__dict__
    last = {
        "report": "hostile-load",
        "created_at": "2026-01-01T00:00:00Z",
        "tier": tier,
        "servers": {"slipway": {"rss": {"bytes_held_per_byte_sent": 5.0}, "slowloris": {"held_by_the_server": 0}}},
        "rss_at": {"slipway_at_old": {"rss": {"bytes_held_per_byte_sent": 4.0}}},
    }
    fresh = {
        "tier": tier,
        "load_average": 1.5,
        "servers": {"slipway": {"rss": {"bytes_held_per_byte_sent": 5.5}, "rss_bytes": {"bytes_held_per_byte_sent": 6.0}}},
        "rss_at": {"slipway_at_new": {"rss_bytes": {"bytes_held_per_byte_sent": 8.0}}},
    }
    report = merged(last, fresh)
    assert report["servers"]["slipway"] == {
        "rss": {"bytes_held_per_byte_sent": 5.5},
        "rss_bytes": {"bytes_held_per_byte_sent": 6.0},
        "slowloris": {"held_by_the_server": 0},  # kept from the last full run
    }
    assert set(report["rss_at"]) == {"slipway_at_old", "slipway_at_new"}
    assert report["rerun"] == {
        "memory_probes_only": ["rss", "rss_bytes"],
        "other_probes_created_at": "2026-01-01T00:00:00Z",
        "load_average": 1.5,
    }
    assert "created_at" not in report  # stamped anew as it is written


def test_a_memory_only_run_without_a_report_of_the_same_body_size_is_refused():
    fresh = {"tier": Tier().__dict__, "load_average": 1.0, "servers": {}, "rss_at": {}}
    with pytest.raises(UserError, match="run `python -m benchmarks hostile-load` once without --memory-only"):
        merged(None, fresh)
    other = {"tier": {**Tier().__dict__, "body_mib": 8}, "servers": {"slipway": {}}}
    with pytest.raises(UserError, match="measured 8 MiB bodies: pass --mib 8, or run without --memory-only"):
        merged(other, fresh)
