"""Other tools' arithmetic reproduced (LeRobot's aggregation, openpi's normalization statistics), to name the cause of a stored number that differs."""
