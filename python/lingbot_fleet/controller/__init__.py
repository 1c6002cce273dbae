"""What runs only where ansible-playbook runs: the policy check, the planner's gathering,
receipts answered by action plugins, the node app builder, the bundled collection, playbook
runs and the generations CLI."""
