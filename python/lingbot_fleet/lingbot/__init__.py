"""The LingBot server on a node: its config, unit layout, the service module's options and
readings, readiness and warm-up, the chat load of a rollout gate. Runs on the node (standard
library only)."""
