"""What every node-side module shares: atomic writes, the one write path (NodeChanges),
generations and rollback, receipts, the run lock, the toolkit's state directories, value
validators, findings, systemd unit text.

Everything under node/, boot/, gpu/ and lingbot/ runs on the managed node inside an Ansible
module or the monitor, so it imports the standard library only (tests/unit/test_layout.py
checks the import closure); controller/ runs where ansible-playbook runs.
"""
