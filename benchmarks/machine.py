"""How fast this machine is right now, for benchmarks to print beside their figures.

These machines are shared virtual machines: the same pure-Python loop has taken 4.5 ms and
27 ms within one hour on one of them, with or without CPU time stolen by the hypervisor. A
figure is read against the loop's time (and the stolen share) measured beside it.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path


def cpu_probe_ms(rounds: int = 5) -> float:
    """The median time of a fixed pure-Python loop: this machine's speed at this moment."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        total = 0
        for i in range(200_000):
            total += i
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def cpu_ticks() -> tuple[int, int] | None:
    """(all CPU ticks, ticks stolen by the hypervisor) of this machine so far (Linux's
    /proc/stat), or None elsewhere."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0  # user … softirq, steal


def steal_since(before: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time the hypervisor gave to others since `before`."""
    after = cpu_ticks()
    if before is None or after is None or after[0] == before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"
