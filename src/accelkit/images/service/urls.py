"""Images from http(s) URLs (`server.allow_urls`), fetched only from public addresses.

With URL fetching on, a client once made the service fetch its own `/metrics` and 127.0.0.1 in
every spelling (`127.1`, `2130706433`, `0.0.0.0`, `[::1]`, a redirect), and the cloud metadata
address 169.254.169.254. So every hop — the URL and each redirect — is resolved here, once; every
address it resolves to must be public (not loopback, private, link-local, shared, multicast,
reserved or unspecified; an IPv4-mapped IPv6 address counts as its IPv4 address), unless
`server.url_allow` names the URL's host; and the request goes to the checked address itself
(the URL's host replaced by it, the `Host` header and the TLS server name kept), so the name is
never resolved a second time. Environment proxies are not used (a proxy would resolve the name
itself; SSL_CERT_FILE and SSL_CERT_DIR still count), and redirects are followed here, at most `MAX_REDIRECTS`, each checked like the first.

A refused address is a 403 (`url_not_allowed`) for the whole request, like a path outside the
allowed roots; a URL that cannot be fetched is that image's `DataError`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urljoin

from accelkit.errors import DataError, InputError
from accelkit.images.service.errors import ServiceError
from accelkit.images.settings.config import ServerConfig

MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def is_public(address: Address) -> bool:
    """Whether `address` is one the service may fetch from without `url_allow`. An IPv6 address
    that carries an IPv4 one (IPv4-mapped, 6to4 2002::/16) is judged by that IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None and not is_public(inner):
            return False
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast
        or address.is_reserved
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or getattr(address, "is_site_local", False)
    )


def _allowed(host: str, allow: list[str]) -> bool:
    """`host` (as the URL writes it, lower case) is named in `url_allow`; an IP address matches
    however the list writes it, other spellings of an address (`127.1`) never do."""
    host = host.rstrip(".")
    if host in allow:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for entry in allow:
        try:
            if ipaddress.ip_address(entry) == address:
                return True
        except ValueError:
            continue
    return False


async def checked_address(host: str, port: int, allow: list[str], url: str, where: str) -> str:
    """The address to connect to for `host`: resolved once, and every address it resolves to
    public unless `allow` names the host."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DataError(f"{where}: cannot resolve the host of {url} ({exc})") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise DataError(f"{where}: the host of {url} has no address")
    if not _allowed(host, allow):
        for text in addresses:
            if not is_public(ipaddress.ip_address(text.split("%")[0])):
                raise ServiceError(  # the address itself is not echoed: no map of internal DNS
                    403,
                    "url_not_allowed",
                    f"{where}: {url} leads to an address that is not public (loopback,"
                    " private, link-local or reserved); list its host in server.url_allow to"
                    " fetch from it",
                )
    return addresses[0]


_SSL: dict = {}


def _ssl_context():
    """One TLS context for every fetch, made again only when SSL_CERT_FILE or SSL_CERT_DIR
    changes (they still count)."""
    import os

    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if key not in _SSL:
        import httpx

        _SSL.clear()
        _SSL[key] = httpx.create_ssl_context(trust_env=True)
    return _SSL[key]


async def fetch_url(url: str, server: ServerConfig, where: str) -> bytes:
    """GET an http(s) URL from a checked address within `fetch_max_bytes` and one deadline of
    `fetch_timeout_s` for the whole exchange, redirects included (a server that drips one byte at
    a time is cut off at the deadline)."""
    if not server.allow_urls:
        raise ServiceError(
            403,
            "urls_disabled",
            f"{where}: fetching URLs is disabled; upload the image or set server.allow_urls",
        )
    import httpx

    chunks, total, current = [], 0, url
    try:
        async with (
            asyncio.timeout(server.fetch_timeout_s),
            httpx.AsyncClient(
                timeout=server.fetch_timeout_s,
                follow_redirects=False,
                trust_env=False,  # no proxy from the environment: it would resolve the name
                verify=_ssl_context(),  # built once: each costs CPU on the event loop
                limits=httpx.Limits(max_keepalive_connections=0),  # no connection across hosts
            ) as client,
        ):
            for _ in range(MAX_REDIRECTS + 1):
                try:
                    target = httpx.URL(current)
                except httpx.InvalidURL as exc:
                    raise InputError(f"{where}: {current[:80]!r} is not a URL ({exc})") from None
                if target.scheme not in ("http", "https") or not target.raw_host:
                    raise InputError(
                        f"{where}: only http(s) URLs can be fetched, not {current[:40]!r}"
                    )
                host = target.raw_host.decode("ascii").lower()
                port = target.port or (443 if target.scheme == "https" else 80)
                address = await checked_address(host, port, server.url_allow, current, where)
                pinned = target.copy_with(host=address.split("%")[0])
                extensions = {"sni_hostname": host} if target.scheme == "https" else {}
                # identity: a compressed body would be inflated before its size is counted
                headers = {"Host": target.netloc.decode("ascii"), "Accept-Encoding": "identity"}
                async with client.stream(
                    "GET", pinned, headers=headers, extensions=extensions
                ) as response:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECTS and location:
                        current = urljoin(str(target), location)
                        continue
                    if response.status_code != 200:
                        raise DataError(f"{where}: {current} answered HTTP {response.status_code}")
                    async for chunk in response.aiter_bytes():
                        total += len(chunk)
                        if total > server.fetch_max_bytes:
                            raise DataError(
                                f"{where}: {current} is larger than the limit of"
                                f" {server.fetch_max_bytes:,} bytes"
                            )
                        chunks.append(chunk)
                    return b"".join(chunks)
            raise DataError(f"{where}: {url} redirects more than {MAX_REDIRECTS} times")
    except TimeoutError as exc:
        raise DataError(
            f"{where}: {url} did not answer in full within server.fetch_timeout_s"
            f" ({server.fetch_timeout_s:g} s)"
        ) from exc
    except httpx.HTTPError as exc:
        raise DataError(f"{where}: cannot fetch {current} ({type(exc).__name__}: {exc})") from exc
