"""`ray start` for a worker node of a cluster that lives on 127.0.0.1.

Ray rewrites 127.0.0.1 to the machine's outward address unless its "clusters" switch is off
(`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, what it does on macOS and Windows), and with the switch off
`ray start --address` refuses to add a node. This runs Ray's own `ray start` with the switch off for
every address Ray resolves (so the node, its raylet and its workers stay on loopback) and on only
for that one refusal. The head node and the driver need nothing: they run with the switch off.
"""

from __future__ import annotations

import sys
import types


def main() -> None:
    import ray._private.ray_constants as constants
    import ray.scripts.scripts as scripts

    view = types.ModuleType("ray_constants_for_ray_start")
    view.__dict__.update(vars(constants))
    view.ENABLE_RAY_CLUSTER = True  # read by `ray start` only, for its multi-node check
    scripts.ray_constants = view
    sys.argv = ["ray", *sys.argv[1:]]
    scripts.main()


if __name__ == "__main__":
    main()
