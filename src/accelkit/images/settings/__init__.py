"""The settings of `accelkit images`: config.py (the sections: preprocessing, model, store,
service), schema.py (what the commands, the service and the store accept: ids, names, metadata,
request bodies) and filters.py (the filter grammar Milvus reads exactly as written)."""
