"""Ray, connected: the one way every `--ray` option (stats, images) joins or starts a cluster."""

from __future__ import annotations

import os
import re

from accelkit.errors import AccelkitError, ConfigError, DeviceError
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


def task_error(exc: BaseException, extra: str, retries: int | None = None) -> AccelkitError:
    """One line for a Ray task or actor of ours that failed (the traceback is the caller's to log
    under --debug): our own error as it was raised; a worker that cannot import a module (accelkit
    or a package of its `extra` missing on a node, or another Python there) named with the install
    to make; another exception named as the task raised it; a lost worker or actor named with the
    cluster check to make (`retries`: how often Ray retried it first)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, AccelkitError):
        return cause
    missing = re.search(r"No module named '([^']+)'", str(exc))
    if missing:
        return DeviceError(
            f"the Ray cluster's workers cannot import {missing.group(1)!r}; install accelkit with "
            f"its {extra} extra, the same version as here, in the Python every node runs"
        )
    if isinstance(cause, BaseException):
        text = str(cause).strip()
        return DeviceError(
            f"a Ray task raised {type(cause).__name__}"
            + (f": {text.splitlines()[-1]}" if text else "")
            + f"; check that every node has the same accelkit and {extra} extra as this one "
            "(run with --debug for the task's traceback)"
        )
    text = str(exc).strip()
    first = text.splitlines()[-1] if text else ""
    after = f" after {retries} retries" if retries else ""
    return DeviceError(
        f"a Ray task failed{after} ({type(exc).__name__}: {first}); check the cluster's workers "
        f"(ray status) and that accelkit and its {extra} extra are installed on every node"
    )
