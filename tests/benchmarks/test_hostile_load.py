"""`python -m benchmarks hostile-load`: its bookkeeping and its plot, without a server (the servers it measures are
the ones tests/wrappers/test_hostile_load.py starts)."""

from __future__ import annotations

from benchmarks.hostile_load import Outcomes, Tier, plot


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
        "small_requests": {"during_the_large_body": {"p99_ms": 200.0}},
        "slowloris": {"held_by_the_server": 0},
        "unknown_models": {"series_after": 200},
        "malformed": {"rest_log_bytes_per_request": 0.0, "grpc_log_bytes_per_request": 26.0},
        "sigterm": {"lost": {"rest": 0, "grpc": 6}},
    }
    payload = {"tier": Tier().__dict__, "servers": {"slipway": server, "plain_mlserver": server}, "rss_at": {}}
    plot(payload, tmp_path / "hostile-load.png")
    assert (tmp_path / "hostile-load.png").read_bytes().startswith(b"\x89PNG")
