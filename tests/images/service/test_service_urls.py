"""Images from URLs (`server.allow_urls`): limits, one deadline, and only public addresses unless
`server.url_allow` names the host — checked after resolution and on every redirect, and the
request goes to the address that was checked. A real HTTP(S) server on 127.0.0.1 counts the hits
it gets; names other than localhost come from a resolver table (this sandbox has no DNS)."""

import asyncio
import datetime
import socket
import ssl
from collections import Counter

import pytest

from accelkit.errors import DataError, InputError
from accelkit.images.service import ServiceError
from accelkit.images.service.urls import fetch_url, is_public
from accelkit.images.settings.config import ServerConfig
from tests.support.url_server import IMAGE, Helper


@pytest.fixture
def helper():
    server = Helper()
    yield server
    server.close()


@pytest.fixture
def names(monkeypatch):
    """A resolver table for names this sandbox cannot look up: name -> addresses, one list per
    lookup (the last one repeats); `calls` counts the lookups of each name."""
    table: dict[str, list[list[str]]] = {}
    calls: Counter = Counter()
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        key = host.decode() if isinstance(host, bytes) else host
        if key not in table:
            return real(host, port, *args, **kwargs)
        answers = table[key]
        addresses = answers[min(calls[key], len(answers) - 1)]
        calls[key] += 1
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table, calls


def fetch(url: str, config: ServerConfig) -> bytes:
    # the outer wait only guards the test: fetch_url has its own deadline
    return asyncio.run(asyncio.wait_for(fetch_url(url, config, "q"), 60))


def refused(url: str, config: ServerConfig) -> str:
    with pytest.raises(ServiceError) as caught:
        fetch(url, config)
    assert (caught.value.status, caught.value.code) == (403, "url_not_allowed"), caught.value
    return caught.value.message


def test_fetch_url_limits_against_a_local_http_server(helper):
    """allow_urls on (and the helper's address allowed): size limit and errors."""
    base = f"http://127.0.0.1:{helper.port}"
    config = ServerConfig(
        allow_urls=True, url_allow=["127.0.0.1"], fetch_max_bytes=2000, fetch_timeout_s=5
    )
    assert fetch(f"{base}/img", config) == IMAGE
    with pytest.raises(DataError, match="larger than the limit of 2,000"):
        fetch(f"{base}/big", config)
    with pytest.raises(DataError, match="HTTP 404"):
        fetch(f"{base}/missing.jpg", config)
    with pytest.raises(InputError, match="only http"):
        fetch("file:///etc/passwd", config)
    with pytest.raises(ServiceError) as disabled:
        fetch(f"{base}/img", ServerConfig(url_allow=["127.0.0.1"]))
    assert (disabled.value.status, disabled.value.code) == (403, "urls_disabled")
    assert helper.hits == Counter({"/img": 1, "/big": 1, "/missing.jpg": 1})


def test_fetch_url_has_one_deadline_for_the_whole_exchange(helper):
    """A server that drips one chunk every 0.3 s, each within the per-read timeout, is cut off at
    fetch_timeout_s for the whole download instead of being followed for as long as it drips."""
    config = ServerConfig(allow_urls=True, url_allow=["127.0.0.1"], fetch_timeout_s=1.5)
    with pytest.raises(
        DataError, match=r"did not answer in full within server.fetch_timeout_s \(1.5 s\)"
    ):
        fetch(f"http://127.0.0.1:{helper.port}/drip", config)


def test_internal_addresses_are_refused_in_every_spelling_and_on_every_redirect(helper):
    """With allow_urls on, the service fetched loopback in every spelling, redirects to
    its own /metrics and 169.254.169.254. Now any address that is not public is refused after
    resolution, on every hop, unless url_allow names the host: the helper gets 0 hits from the
    refused ones."""
    port = helper.port
    default = ServerConfig(allow_urls=True, fetch_timeout_s=5)
    assert "not public" in refused(f"http://127.0.0.1:{port}/img", default)
    assert helper.hits["/img"] == 0  # loopback is refused by default
    config = ServerConfig(allow_urls=True, url_allow=["127.0.0.1"], fetch_timeout_s=5)
    assert fetch(f"http://127.0.0.1:{port}/img", config) == IMAGE  # the name it allows
    assert helper.hits["/img"] == 1
    for spelling in (
        "127.1",
        "2130706433",
        "0x7f.1",
        "017700000001",
        "127.0.0.2",
        "0.0.0.0",
        "0",
        "localhost",
        "LocalHost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::]",
    ):
        message = refused(f"http://{spelling}:{port}/img", config)
        assert "server.url_allow" in message, message
    for address in (
        "169.254.169.254",  # cloud metadata (link-local)
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "100.64.0.1",  # shared (carrier-grade NAT)
        "224.0.0.1",  # multicast
        "240.0.0.1",  # reserved
        "[fe80::1]",
        "[fd00::1]",
        "[fec0::1]",
        "[::ffff:169.254.169.254]",
    ):
        refused(f"http://{address}/latest/meta-data/", config)
    assert helper.hits["/img"] == 1  # no spelling of loopback got through
    # every redirect hop is checked: an allowed hop that redirects inside is followed,
    # one that redirects to a refused address is refused before connecting there
    to = f"http://127.0.0.1:{port}/to?u="
    assert fetch(f"{to}/img", config) == IMAGE
    assert fetch(f"{to}http://127.0.0.1:{port}/img", config) == IMAGE
    assert helper.hits["/img"] == 3
    for target in (f"http://127.1:{port}/img", f"http://localhost:{port}/metrics"):
        refused(f"{to}{target}", config)
    refused(f"{to}http://169.254.169.254/latest/meta-data/", config)
    assert helper.hits["/img"] == 3 and helper.hits["/metrics"] == 0
    with pytest.raises(DataError, match="redirects more than 3 times"):
        fetch(f"{to}{to}{to}{to}/img", config)
    assert helper.hits["/img"] == 3
    assert is_public(__import__("ipaddress").ip_address("93.184.216.34"))


def test_the_checked_address_is_the_one_connected_to(helper, names):
    """A name is resolved once per hop and the connection goes to that address, with the URL's
    Host header: a second lookup that answered another address (DNS rebinding) is never made.
    The table answers 127.0.0.1 first, 127.0.0.2 (where nothing listens) afterwards."""
    table, calls = names
    table["images.test"] = [["127.0.0.1"], ["127.0.0.2"]]
    config = ServerConfig(allow_urls=True, url_allow=["images.test"], fetch_timeout_s=5)
    assert fetch(f"http://images.test:{helper.port}/img", config) == IMAGE
    assert calls["images.test"] == 1 and helper.hosts[-1] == f"images.test:{helper.port}"
    # a name that is not allowed and resolves to a loopback address is refused; one of its
    # addresses being internal is enough
    table["mixed.test"] = [["93.184.216.34", "127.0.0.1"]]
    refused(f"http://mixed.test:{helper.port}/img", config)
    assert helper.hits["/img"] == 1


def test_https_keeps_the_host_name_for_sni_and_the_certificate(names, monkeypatch, tmp_path):
    """Connected to the checked address, an https fetch still sends the host name as the TLS
    server name and verifies the certificate against it (a test CA via SSL_CERT_FILE)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def certificate(subject, issuer, key, signer, ca: bool):
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("accelkit test CA", "accelkit test CA", ca_key, ca_key, ca=True)
    leaf = certificate("images.test", "accelkit test CA", key, ca_key, ca=False)
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.pem").write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "leaf.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    table, _ = names
    table["images.test"] = [["127.0.0.1"]]
    table["other.test"] = [["127.0.0.1"]]
    server = Helper(tls)
    try:
        config = ServerConfig(
            allow_urls=True, url_allow=["images.test", "other.test"], fetch_timeout_s=5
        )
        assert fetch(f"https://images.test:{server.port}/img", config) == IMAGE
        assert server.server_names == ["images.test"]
        assert server.hosts == [f"images.test:{server.port}"]
        with pytest.raises(DataError, match="cannot fetch"):  # the certificate names images.test
            fetch(f"https://other.test:{server.port}/img", config)
        assert server.server_names[-1] == "other.test" and server.hits["/img"] == 1
    finally:
        server.close()


def test_one_deadline_for_all_the_sources_of_a_request(helper):
    """Eight dripping URLs in one request: four are fetched at a time, each cut off by its own
    deadline, and the four still waiting when the request's deadline passes fail with it, instead
    of each waiting its turn for a deadline of its own (256 slow sources once held a request for
    minutes)."""
    from accelkit.images.service.sources import Source
    from accelkit.images.service.state import FETCH_CONCURRENCY, ServiceState
    from accelkit.images.settings.config import ServiceConfig

    server = ServerConfig(allow_urls=True, url_allow=["127.0.0.1"], fetch_timeout_s=1.0)
    state = ServiceState(ServiceConfig(server=server), pipeline=object())
    url = f"http://127.0.0.1:{helper.port}/drip"
    try:
        loaded, failures, _ = asyncio.run(
            state.load_images([Source("url", url) for _ in range(2 * FETCH_CONCURRENCY)], "inputs")
        )
    finally:
        state.executor.shutdown()
    assert loaded == [] and len(failures) == 2 * FETCH_CONCURRENCY
    waited = [i for i, reason in failures.items() if "for the request's images" in reason]
    assert waited, failures  # the request's own deadline ended the ones still queued
    assert helper.hits["/drip"] <= 2 * FETCH_CONCURRENCY
