from pathlib import Path

import pytest

SAMPLES = Path(__file__).parent / "samples"


@pytest.fixture
def sample():
    def read(name: str) -> str:
        return (SAMPLES / name).read_text()

    return read
