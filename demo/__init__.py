"""The live demonstration: a fault-injecting provider over HTTP, sources that call it, a workload.

- `demo.provider`: a small HTTP service on 127.0.0.1 that plays several data providers and fails
  the way real ones do (seeded, configurable fault mix).
- `demo.sources`: the subagents' sources, calling the provider with httpx; every failure they raise
  is a real client exception, classified by the real classifier.
- `demo.workload`: the stream of research workflows that `manage.py launch` starts.
"""
