"""One validator per kind of value the toolkit puts into a path, a command, a unit or the
boot line.

Each validator takes the value and the name of the variable (or option) it came from, and
returns the value in its checked form or raises ValueError whose text names the variable,
what is wrong and the fix. The policy play and every module or action that uses a value
call the same validator, so a role used from any playbook, with any tags, refuses the same
values with the same message. Standard library only: role modules import it on the node.
"""

from __future__ import annotations
