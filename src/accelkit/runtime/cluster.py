"""Ray, connected: the one way every `--ray` option (stats, images) joins or starts a cluster."""

from __future__ import annotations

import os

from accelkit.errors import ConfigError
from accelkit.runtime.logs import third_party_level

LOCAL_OBJECT_STORE_BYTES = 200_000_000  # `--ray local`: a small object store of this machine's


def connect(address: str):
    """`ray`, connected: "local" starts a private instance on 127.0.0.1 (dashboard off, no usage
    statistics); "auto" joins the cluster this machine belongs to; anything else is a cluster's
    address (host:port, or ray://host:port for Ray Client)."""
    from accelkit.errors import require

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = require("ray", "ray")
    if ray.is_initialized():
        return ray
    # ray.init sets the "ray" logger's level: keep what runtime.logs chose (quiet unless --debug)
    options = {
        "include_dashboard": False,
        "logging_level": third_party_level(),
        "log_to_driver": False,
    }
    try:
        if address == "local":
            ray.init(
                address="local",
                _node_ip_address="127.0.0.1",
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                **options,
            )
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(
            f"cannot connect to the Ray cluster at --ray {address} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); start it with `ray start --head`, "
            "or use --ray local"
        ) from exc
    from accelkit.runtime import interrupts

    interrupts.install()  # ray.init set its own SIGTERM handler (sys.exit without a word)
    return ray
