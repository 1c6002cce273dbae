"""The GPUs and their paths: the CUDA driver API, persistence, the P2P probe and its saved
result, PCIe link checks and ACS. Runs on the node (standard library; pynvml where present)."""
