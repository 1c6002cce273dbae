"""The fleet audit: read-only collection on every node, evaluation and reports on the controller.

Kept free of imports: `node` is shipped to the nodes (stdlib only) through module_utils,
the rest (`evaluate`, `fleet`, `reports`, `runner`, `cli`) runs on the controller.
docs/audit.md describes the flow, the fleet.json schema and the exit codes.
"""
