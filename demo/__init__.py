"""The live demonstration: a fault-injecting provider over HTTP, sources that call it, a workload.
An add-on: the product never imports it."""
