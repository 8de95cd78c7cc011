"""What the library API (`accelkit.images.api`) works with around each operation: what it takes
(inputs.py: paths, globs, URIs, metadata), where embed and insert run (runners.py: here or on
Ray) and what it returns (results.py: the result objects whose `document()` is the --json
result)."""
