"""Running the service: uvicorn on a socket bound first (a busy port is one clear error), with
deadlines uvicorn lacks (headers, slow readers) and glibc tuned to give image buffers back."""

from __future__ import annotations

from collections.abc import Callable

from accelkit.errors import ConfigError
from accelkit.images.settings.config import ServiceConfig
from accelkit.images.store import check_lite_free

M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def return_freed_memory() -> bool:
    """Let glibc give freed image buffers back to the system (allocations over 128 KiB are
    mapped, and unmapped when freed): with its default, memory of decoded images stayed with the
    process while idle and its peak crept up round by round (docs/images.md). glibc's public
    `mallopt`, by ctypes; False where the C library has none (not glibc: nothing to tune)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1
    except (OSError, AttributeError):
        return False


def header_deadline_protocol(header_timeout: float, send_timeout: float):
    """uvicorn's HTTP/1.1 protocol, closing a connection that has not sent a whole request's
    headers within `header_timeout` seconds of opening (or of its last response), or that has not
    read any of a buffered answer for `send_timeout` seconds. uvicorn has neither limit:
    connections that each sent half a header stayed open for good, and a few that never read a
    large answer held its memory."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_deadline()

        def connection_lost(self, exc) -> None:
            self._disarm_header_deadline()
            self._disarm_send_deadline()
            super().connection_lost(exc)

        # A client that stops reading leaves its answer buffered here: give it `send_timeout`.
        def pause_writing(self) -> None:
            super().pause_writing()
            self._disarm_send_deadline()
            self._send_timer = self.loop.call_later(send_timeout, self.transport.abort)

        def resume_writing(self) -> None:
            self._disarm_send_deadline()
            super().resume_writing()

        def _disarm_send_deadline(self) -> None:
            timer = getattr(self, "_send_timer", None)
            if timer is not None:
                timer.cancel()
                self._send_timer = None

        def _arm_header_deadline(self) -> None:
            self._disarm_header_deadline()
            self._header_timer = self.loop.call_later(
                header_timeout, self._header_deadline, self.cycle
            )

        def _disarm_header_deadline(self) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()

        def _header_deadline(self, cycle) -> None:
            waiting = self.cycle is cycle and (cycle is None or cycle.response_complete)
            if waiting and not self.transport.is_closing():  # no new request since: drop it
                self.transport.close()

    return HeaderDeadline


def serve(
    config: ServiceConfig,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run the service with uvicorn until SIGINT/SIGTERM; in-flight requests finish first.
    The port is bound before anything else, so a busy port is one clear error."""
    import socket

    import uvicorn

    server = config.server
    host = host or server.host
    port = server.port if port is None else port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or stop what uses it"
        ) from exc

    check_lite_free(config.store.uri)  # one line and exit 2, not uvicorn's startup traceback
    return_freed_memory()
    from accelkit.images.service.app import create_app  # imports fastapi

    app = create_app(config)
    if on_ready:
        on_ready(f"http://{host}:{sock.getsockname()[1]}")
    uvicorn_config = uvicorn.Config(
        app,
        http=header_deadline_protocol(server.header_timeout_s, server.send_timeout_s),
        timeout_graceful_shutdown=int(server.shutdown_timeout_s),
        log_level=config.log_level.lower(),
        access_log=False,
        limit_concurrency=server.max_connections,  # beyond: 503 at once, no task, no body read
        proxy_headers=False,
    )
    uvicorn.Server(uvicorn_config).run(sockets=[sock])
