"""The live demonstration: a fault-injecting provider over HTTP, sources that call it, a workload.

- `demo.provider`: a small HTTP service on 127.0.0.1 that plays several data providers and fails
  the way real ones do (seeded, configurable fault mix).
- `demo.http_sources`: the subagents' sources, calling the provider with httpx; every failure they
  raise is a real client exception, classified by the real classifier.
- `demo.inprocess`: the same kinds of sources without a network (exceptions built on real httpx
  responses), for the test suite, the recovery benchmark and `manage.py demo`.
- `demo.workload`: the stream of research workflows that `manage.py launch` starts.
- `demo.management`: the `launch` command (the main job) and `demo`.

An add-on: the product (`orchestrator`, `dashboard`, `classifier`) never imports it; `launch`
names its sources in FAILSIGHT_SOURCE_MODULES for the worker it starts.
"""
