"""The fleet audit: read-only collection on every node, evaluation and reports on the controller.

Kept free of imports. What the audit reads on a node is lingbot_fleet.facts.audit_reading
(stdlib only, shipped through module_utils); everything here (`evaluate`, `fleet`,
`reports`, `runner`, `cli`) runs on the controller.
docs/audit.md describes the flow, the fleet.json schema and the exit codes.
"""
