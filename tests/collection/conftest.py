"""Fixtures of tests/collection: the collection and the wheel, built once per session
(collection_support)."""

from collection_support import built_collection, wheel_venv  # noqa: F401
