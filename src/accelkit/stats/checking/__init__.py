"""`accelkit.stats.check` and `fix` (`api.py`): the stored statistics against exact ones, each error in its unit (`compare.py`), and the cause of a number that is off (`causes.py`)."""
