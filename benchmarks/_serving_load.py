"""A bounded closed-loop HTTP load on loopback for the serving benchmark.

``concurrency`` threads each hold one keep-alive ``http.client`` connection and send the
same POST body back to back: a new request only when the previous answer arrived (closed
loop), until ``requests`` answers in total or ``time_cap_s`` passed, whichever comes first.
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    """Latencies of the answered requests, errors, and the wall time of the whole load."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    wall_s: float = 0.0
    server_cpu_s: float = 0.0  # CPU the server's processes used meanwhile (set by the caller)
    cpu_by_process: dict[str, float] = field(default_factory=dict)  # the same, by process

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.server_cpu_s / len(self.latencies) if self.latencies else 0.0

    def pct(self, q: float) -> float:
        return pct(self.latencies, q)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) by nearest rank; nan when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def post_once(port: int, path: str, body: bytes, timeout_s: float = 30.0) -> tuple[int, dict]:
    """One POST: (status, decoded JSON answer or {})."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        try:
            return reply.status, json.loads(data)
        except ValueError:
            return reply.status, {"raw": data[:300].decode(errors="replace")}
    finally:
        conn.close()


def run_load(
    port: int,
    path: str,
    body: bytes | None,
    concurrency: int,
    requests: int,
    time_cap_s: float,
    timeout_s: float = 30.0,
) -> LoadResult:
    """``requests`` POSTs of ``body`` (GETs when None) by ``concurrency`` keep-alive clients."""
    result = LoadResult()
    lock = threading.Lock()
    tickets = itertools.count()  # next() on a count is atomic under the GIL
    headers = {"Content-Type": "application/json", "Connection": "keep-alive"}
    deadline = time.perf_counter() + time_cap_s

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
        mine: list[float] = []
        try:
            while next(tickets) < requests and time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    conn.request("GET" if body is None else "POST", path, body, headers)
                    reply = conn.getresponse()
                    data = reply.read()
                    ok = reply.status == 200
                    why = f"HTTP {reply.status}: {data[:200]!r}"
                except (OSError, http.client.HTTPException) as exc:
                    ok, why = False, f"{type(exc).__name__}: {exc}"
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
                took = time.perf_counter() - t0
                if ok:
                    mine.append(took)
                else:
                    with lock:
                        result.errors += 1
                        result.first_error = result.first_error or why
        finally:
            conn.close()
            with lock:
                result.latencies.extend(mine)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.wall_s = time.perf_counter() - started
    return result
