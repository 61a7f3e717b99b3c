"""Who is asking: the client's address, believing X-Forwarded-For only from TRUSTED_PROXIES.

A forwarded header is whatever the sender wrote, so it counts only when the connection comes from
a proxy we run; the proxy appends the address it saw, so the header is read from the right, past
our own proxies, to the first address none of them is. /metrics' allow-list and the sign-in
lockout (django-axes, through AXES_CLIENT_IP_CALLABLE) both ask here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=32)
def _networks(values: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(v, strict=False) for v in values)


def address_in(address: str, networks: Iterable[str]) -> bool:
    """Return True if `address` lies in any of `networks` (addresses or CIDR networks)."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in net for net in _networks(tuple(networks)) if ip.version == net.version)


def client_ip(request: HttpRequest) -> str:
    """Return the address of the client: the connection's, or, through trusted proxies only,
    the right-most forwarded address that is not one of them."""
    trusted = tuple(settings.TRUSTED_PROXIES)
    remote = request.META.get("REMOTE_ADDR", "")
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if not forwarded or not address_in(remote, trusted):
        return remote
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not address_in(hop, trusted):
            return hop
    return hops[0] if hops else remote
