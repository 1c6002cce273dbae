"""Simulated GPU server hardware for the lingbot-fleet lab.

A hardware profile (lab/profiles/<name>.yml, shipped to the node as JSON) plus the running
kernel command line give the state (hwstate), from which the sysfs tree (sysfs, configspace)
is rendered at boot by the firmware. grubcfg is the node's boot loader configuration.
"""

LAB_RUN_DIR = "/run/lingbot-lab"
LAB_PROFILE_PATH = "/opt/lingbot-lab/profile.json"
