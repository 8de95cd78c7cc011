"""The application layer, `ImageIndex` (base.py), and its two implementations: the config's own
store and model in this process (local.py) or a running service over HTTP (remote.py)."""
