"""The simulated GPU lab: rootfs, nodes, supervisor (the only product code that knows the lab)."""
