"""What every capability shares: devices, configuration, progress and time budgets, atomic files."""
