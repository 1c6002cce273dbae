"""Lab boot time: how long `lab up` takes to get N nodes answering SSH.

Run by hand (make bench); prints one line per size. Each size starts from a stopped lab
and the cached rootfs, so the figure is the boot cost, not debootstrap.
"""

from __future__ import annotations

import argparse
import itertools
import time

from lingbot_fleet.lab.manager import Lab, available_profiles


def boot_seconds(lab: Lab, count: int) -> float:
    profiles = list(itertools.islice(itertools.cycle(available_profiles()), count))
    lab.down(quiet=True)
    started = time.monotonic()
    lab.up(profiles)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="4,16", help="node counts (default 4,16)")
    args = parser.parse_args()
    lab = Lab(log=lambda _message: None)
    lab.down(quiet=True)
    lab.up(available_profiles()[:1])  # warm: rootfs and native libraries built
    try:
        for count in (int(size) for size in args.sizes.split(",")):
            seconds = boot_seconds(lab, count)
            print(f"lab up, {count:3d} nodes: {seconds:6.1f} s to SSH on every node")
    finally:
        lab.down(quiet=True)


if __name__ == "__main__":
    main()
