"""lingbot-fleet: provision, tune and audit multi-GPU servers for LingBot."""

__version__ = "0.1.0"
