"""The path monitor: a short probe of the GPU paths LingBot uses, judged against the plan.

One run (lingbot-fleet-monitor.timer starts one every few minutes):

1. read the plan in force (/etc/lingbot/plan.json, docs/plan.md): the instances, their
   GPUs and the peer-access pairs each uses with its threshold (``judge``);
2. gather the facts, probe the used pairs and every GPU's host bandwidth with small copies
   (lingbot_fleet.gpu.probe), and check the links (lingbot_fleet.gpu.linkcheck) (``run``);
3. judge each used pair: usable when peer access works, the data check passed and the
   measured bandwidth is at or above the instance's threshold (``judge``). A pair that is
   not usable counts one more consecutive run in the state file; a usable pair resets its
   count (``state``);
4. when a pair of an instance has not been usable for ``consecutive_runs`` runs in a row,
   recommend the single-GPU fallback for that instance: a finding (``drift``), a metric, a
   journal line, and with ``auto_fallback`` the flag file ``fallback-recommended`` in the
   state directory (``state``). The monitor never changes the LingBot service itself;
5. write the Prometheus metrics atomically to node_exporter's textfile directory
   (``metrics``), the state, and the run's report (``last-run.json``).

``config`` reads and checks /etc/lingbot-fleet/monitor.json, ``cli`` is the command line
(``python -m lingbot_fleet.monitor``). Stdlib only: the topo_monitor role installs it on
the nodes as one zipapp (lingbot_fleet.controller.nodeapp). This file imports nothing, so a module
that needs only ``config`` does not load the rest.
"""
