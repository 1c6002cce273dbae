"""Node facts for lingbot-fleet: one call gathers what the rest of the toolkit needs.

Sources: NVML through pynvml (imported lazily), sysfs and /proc, and nvidia-smi only as a
fallback when NVML is not importable. Stdlib-only otherwise: this runs on the nodes.
"""

from __future__ import annotations

from .document import gather_facts
from .schema import FACT_NAME, FACTS_SCHEMA_VERSION, schema_problems

__all__ = ["FACTS_SCHEMA_VERSION", "FACT_NAME", "gather_facts", "schema_problems"]
