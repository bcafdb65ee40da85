"""`python -m benchmarks body-memory`: its body, its open-loop small requests and its plot, without a server (the
servers it measures are the ones the wrappers tests start)."""

from __future__ import annotations

import json
import time

from benchmarks.body_memory import NUMBER, SMALL_INTERVAL_S, due_latencies, json_body, plot


def test_the_body_is_a_v2_request_of_about_the_size_asked():
    body, count = json_body(1 << 20)
    assert (1 << 20) - len(NUMBER) < len(body) <= (1 << 20) + 100
    request = json.loads(body)["inputs"][0]
    assert request["shape"] == [count] and len(request["data"]) == count


def test_a_stall_counts_for_every_small_request_it_held_back_not_once():
    calls = []

    def send() -> None:
        calls.append(None)
        if len(calls) == 3:
            time.sleep(20 * SMALL_INTERVAL_S)  # the server stalls once, for 20 intervals

    latencies = due_latencies(send, lambda due: len(calls) < 40, most=40, seconds=30)
    held_back = [latency for latency in latencies[2:20] if latency >= 2 * SMALL_INTERVAL_S]
    assert len(latencies) == 40 and len(held_back) >= 15, latencies  # a back-to-back client would record one


def test_no_more_requests_than_asked_and_none_once_not_wanted():
    assert len(due_latencies(lambda: None, lambda due: True, most=3, seconds=30)) == 3
    assert due_latencies(lambda: None, lambda due: False, most=3, seconds=30) == []


def test_the_plot_is_written(tmp_path):
    small = {"alone": {"p99_ms": 2.0}, "during_the_large_body": {"p99_ms": 900.0}}
    server = {"median_bytes_held_per_byte_sent": 5.5, "small_requests": small}
    payload = {"body_bytes": 64 << 20, "small_request_interval_ms": 10.0, "servers": {"a": server, "b": server}}
    plot(payload, tmp_path / "body-memory.png")
    assert (tmp_path / "body-memory.png").read_bytes().startswith(b"\x89PNG")
