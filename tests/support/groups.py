"""xdist groups: tests that share a session-wide process run on one xdist worker (--dist loadgroup).

SERVERS: the real Milvus server and the real Ray cluster, together because some tests need both,
so one of each is started per run.
"""

SERVERS = "servers"
