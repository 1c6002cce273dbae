"""Stand-in for the LingBot inference server (lab use): LingBot's command line, config
and constraints, enforced; its HTTP endpoints, served with deterministic answers."""

VERSION = "0.4.2"
