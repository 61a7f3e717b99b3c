"""MCP benchmark: what a tool call at /mcp costs beside its REST twin, on the server as shipped.

    .venv/bin/python benchmarks/mcp_calls.py [--calls 300] [--database-url …] [--quick]

Starts the web server as shipped (`python -m config.serve`, DEBUG off, one process) on a free
port, against a fresh SQLite database migrated in a temporary folder (or --database-url), with
one API token. Then, in turns of ten calls each so that both sides see the same load, it times
`get_policy` through the SDK's own client (one streamable HTTP session) against
`GET /api/v1/policies` through httpx (one keep-alive connection), and `list_resolutions`
against `GET /api/v1/reviews?state=resolved&delivered=false`. The first calls of each kind warm
the server and are not timed.

It prints the load average first (the machines are shared), each pair's p50 and p95 in
milliseconds, and the ratio of the tool's p50 to its REST twin's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services import VENV_BIN, manage, start_web  # noqa: E402

TURN = 10
WARM_UP = 20
PAIRS = (
    ("get_policy", {}, "/api/v1/policies", {}),
    ("list_resolutions", {}, "/api/v1/reviews", {"state": "resolved", "delivered": "false"}),
)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def server_env(database_url: str) -> dict[str, str]:
    return os.environ | {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "DATABASE_URL": database_url,
        "DEBUG": "0",
        "SECRET_KEY": "benchmark-only-secret-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1",
        "API_RATE_LIMIT_PER_MINUTE": "0",
        "LOG_LEVEL": "WARNING",
        "WEB_ACCESS_LOG": "0",
        "WEB_CONCURRENCY": "1",
    }


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p95) in milliseconds."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, round(0.95 * len(ordered)) - 1)]


async def timed(call: Callable[[], Awaitable[None]], times: int, into: list[float]) -> None:
    for _ in range(times):
        began = time.perf_counter()
        await call()
        into.append((time.perf_counter() - began) * 1000)


async def measure(base: str, secret: str, calls: int) -> dict[str, tuple[list, list]]:
    headers = {"Authorization": f"Bearer {secret}"}
    samples: dict[str, tuple[list, list]] = {tool: ([], []) for tool, *_ in PAIRS}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
        httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as rest,
    ):
        await mcp.initialize()
        for tool, arguments, path, params in PAIRS:

            async def over_mcp(tool: str = tool, arguments: dict = arguments) -> None:
                result = await mcp.call_tool(tool, arguments)
                if result.is_error:
                    raise SystemExit(f"{tool} failed: {result.content}")

            async def over_rest(path: str = path, params: dict = params) -> None:
                (await rest.get(path, params=params)).raise_for_status()

            await timed(over_mcp, WARM_UP, [])
            await timed(over_rest, WARM_UP, [])
            tool_ms, rest_ms = samples[tool]
            for _ in range(max(1, calls // TURN)):
                await timed(over_mcp, TURN, tool_ms)
                await timed(over_rest, TURN, rest_ms)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="Timed calls of each kind")
    parser.add_argument("--database-url", help="Default: a fresh SQLite database, migrated")
    parser.add_argument("--quick", action="store_true", help="20 calls (the suite's smoke test)")
    args = parser.parse_args(argv)
    calls = 20 if args.quick else args.calls
    print(f"load average (1, 5, 15 min) at the start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as folder:
        url = args.database_url or f"sqlite:///{Path(folder) / 'mcp.sqlite3'}"
        env = server_env(url)
        if not args.database_url:
            manage(env, "migrate", "--verbosity", "0", timeout=600)
        secret = manage(env, "createtoken", f"mcp-bench-{os.getpid()}").splitlines()[-1]
        process, base = start_web(env, Path(folder) / "web.log")
        try:
            print(f"load average before timing: {load_average()}")
            samples = anyio.run(measure, base, secret, calls)
        finally:
            process.stop(grace=15)
    print(f"\n{'tool':<18} {'MCP p50':>8} {'p95':>7} {'REST p50':>9} {'p95':>7}   (ms)")
    for (tool, _, path, _), (tool_ms, rest_ms) in zip(PAIRS, samples.values(), strict=True):
        (mcp50, mcp95), (rest50, rest95) = percentiles(tool_ms), percentiles(rest_ms)
        print(f"{tool:<18} {mcp50:8.1f} {mcp95:7.1f} {rest50:9.1f} {rest95:7.1f}")
        print(f"ratio {tool} / GET {path} (p50): {mcp50 / rest50:.2f}x")
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
