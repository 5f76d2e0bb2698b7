"""EndpointSlice defaulting and validation, as the real server applies them on create and update
(dry-run included), so a client that writes slices by hand meets the same 422s.

After upstream `ValidateEndpointSliceCreate`/`ValidateEndpointSliceUpdate`
(pkg/apis/discovery/validation/validation.go, v1.32) and `SetDefaults_EndpointPort`
(pkg/apis/discovery/v1/defaults.go): `addressType` required, one of FQDN/IPv4/IPv6 and immutable;
at most 1000 endpoints, each with 1 to 100 addresses valid for the address type (IPv4 or IPv6
as Go's `net.ParseIP` reads them, and not unspecified, loopback or link-local:
`ValidateNonSpecialIP`; a fully qualified domain name for FQDN), a DNS-1123 `hostname`, a DNS
subdomain `nodeName`, at most 8 distinct zone hints; at most 20000 ports (the API documents
100; the validation allows 20000), each named with a DNS-1123 label or "" and unique, protocol
TCP/UDP/SCTP (TCP when absent), `appProtocol` a qualified name. An update that keeps the
endpoints does not re-validate them. The object's name is checked with the other kinds'
metadata (`admission`). Pure.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from dcgm_sim.statuses import FieldErrors

Obj = dict[str, Any]

ADDRESS_TYPES = ("FQDN", "IPv4", "IPv6")  # sorted, as NotSupported lists them
PROTOCOLS = ("SCTP", "TCP", "UDP")
MAX_ADDRESSES, MAX_PORTS, MAX_ENDPOINTS, MAX_ZONE_HINTS = 100, 20000, 1000, 8

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
              "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  "
              "or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                  "characters, '-' or '.', and must start and end with an alphanumeric character "
                  "(e.g. 'example.com', regex used for validation is "
                  "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_QUALIFIED_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                  "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                  "'123-abc', regex used for validation is "
                  "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
                    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


# ---- the apimachinery string checks -----------------------------------------------------------

def dns1123_label(value: str) -> list[str]:
    """`IsDNS1123Label`."""
    errs = ["must be no more than 63 characters"] if len(value) > 63 else []
    return errs + ([] if _LABEL.match(value) else [_LABEL_MSG])


def dns1123_subdomain(value: str) -> list[str]:
    """`IsDNS1123Subdomain`."""
    errs = ["must be no more than 253 characters"] if len(value) > 253 else []
    return errs + ([] if _SUBDOMAIN.match(value) else [_SUBDOMAIN_MSG])


def qualified_name(value: str) -> list[str]:
    """`IsQualifiedName`: an optional DNS subdomain prefix and '/', then a name part."""
    parts = value.split("/")
    if len(parts) > 2:
        return ["a qualified name " + _QUALIFIED_MSG + " with an optional DNS subdomain "
                "prefix and '/' (e.g. 'example.com/MyName')"]
    name, errs = parts[-1], []
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(parts[0])]
    if not name:
        return [*errs, "name part must be non-empty"]
    if len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QUALIFIED.match(name):
        errs.append("name part " + _QUALIFIED_MSG)
    return errs


def parse_ip(value: str) -> bytes | None:
    """Go's `net.ParseIP` (as `ParseIPSloppy`: IPv4 parts may have leading zeros) as 4 bytes
    for an IPv4 address, IPv4-mapped IPv6 included (`To4`), or 16 for IPv6; None if invalid."""
    if ":" not in value:
        parts = value.split(".")
        if len(parts) != 4 or not all(p.isdigit() and p.isascii() and len(p) <= 3
                                      and int(p) <= 255 for p in parts):
            return None
        return bytes(int(p) for p in parts)
    if "%" in value:
        return None
    try:
        packed = ipaddress.IPv6Address(value).packed
    except ValueError:
        return None
    return packed[12:] if packed[:12] == b"\0" * 10 + b"\xff\xff" else packed


def _special(ip: str, raw: bytes) -> list[str]:
    """`ValidateNonSpecialIP` (pkg/apis/core/validation): no unspecified, loopback or
    link-local address."""
    errs = []
    v4 = len(raw) == 4
    if not any(raw):
        errs.append(f"may not be unspecified ({ip})")
    if (v4 and raw[0] == 127) or (not v4 and raw == b"\0" * 15 + b"\1"):
        errs.append("may not be in the loopback range (127.0.0.0/8, ::1/128)")
    if (v4 and raw[:2] == b"\xa9\xfe") or (not v4 and raw[0] == 0xFE and raw[1] & 0xC0 == 0x80):
        errs.append("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    if (v4 and raw[:3] == b"\xe0\0\0") or (not v4 and raw[0] == 0xFF and raw[1] & 0x0F == 2):
        errs.append("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
    return errs


def _fqdn(path: str, name: str, errors: FieldErrors) -> None:
    """`IsFullyQualifiedDomainName`."""
    if not name:
        errors.add("Required", path)
        return
    name = name[:-1] if name.endswith(".") else name
    errs = dns1123_subdomain(name)
    if errs:
        errors.add("Invalid", path, ",".join(errs), name)
    elif len(name.split(".")) < 2:
        errors.add("Invalid", path, "should be a domain with at least two segments separated "
                   "by dots", name)
    else:
        for label in name.split("."):
            if dns1123_label(label):
                errors.add("Invalid", path, ",".join(dns1123_label(label)), label)
                return


# ---- the EndpointSlice ------------------------------------------------------------------------

def apply_defaults(obj: Obj) -> None:
    """`SetDefaults_EndpointPort`: a port's name defaults to "" and its protocol to TCP."""
    for port in obj.get("ports") or []:
        if isinstance(port, dict):
            if port.get("name") is None:
                port["name"] = ""
            if port.get("protocol") is None:
                port["protocol"] = "TCP"


def _address(address_type: str, path: str, address: Any, errors: FieldErrors) -> None:
    text = str(address)
    if address_type == "FQDN":
        _fqdn(path, text, errors)
        return
    if address_type not in ("IPv4", "IPv6"):
        return  # an unknown type is reported once, at addressType
    raw = parse_ip(text)
    want = 4 if address_type == "IPv4" else 16
    if raw is None or len(raw) != want:
        errors.add("Invalid", path, f"must be a valid {address_type} address", text)
    if raw is None:
        errors.add("Invalid", path, "must be a valid IP address", text)
        return
    for message in _special(text, raw):
        errors.add("Invalid", path, message, text)


def _endpoint(ep: Obj, path: str, address_type: str, errors: FieldErrors) -> None:
    addresses = ep.get("addresses") or []
    if not addresses:
        errors.add("Required", f"{path}.addresses", "must contain at least 1 address")
    elif len(addresses) > MAX_ADDRESSES:
        errors.add("TooMany", f"{path}.addresses", f"must have at most {MAX_ADDRESSES} items",
                   len(addresses))
    for i, address in enumerate(addresses):
        _address(address_type, f"{path}.addresses[{i}]", address, errors)
    if ep.get("nodeName") is not None:
        for message in dns1123_subdomain(str(ep["nodeName"])):
            errors.add("Invalid", f"{path}.nodeName", message, ep["nodeName"])
    if ep.get("hostname") is not None:
        for message in dns1123_label(str(ep["hostname"])):
            errors.add("Invalid", f"{path}.hostname", message, ep["hostname"])
    hints = ep.get("hints")
    if isinstance(hints, dict):
        _zone_hints(hints.get("forZones") or [], f"{path}.hints.forZones", errors)


def _zone_hints(zones: list[Any], path: str, errors: FieldErrors) -> None:
    """`validateHints`: at most 8 zones, distinct, each a label value."""
    if len(zones) > MAX_ZONE_HINTS:
        errors.add("TooMany", path, f"must have at most {MAX_ZONE_HINTS} items", len(zones))
        return
    seen: set[str] = set()
    for i, zone in enumerate(zones):
        name = str((zone or {}).get("name", "")) if isinstance(zone, dict) else ""
        if name in seen:
            errors.add("Duplicate", f"{path}[{i}].name", value=name)
        seen.add(name)
        if len(name) > 63:
            errors.add("Invalid", f"{path}[{i}].name", "must be no more than 63 characters",
                       name)
        if not _LABEL_VALUE.match(name):
            errors.add("Invalid", f"{path}[{i}].name", _LABEL_VALUE_MSG, name)


def _ports(ports: list[Any], errors: FieldErrors) -> None:
    if len(ports) > MAX_PORTS:
        errors.add("TooMany", "ports", f"must have at most {MAX_PORTS} items", len(ports))
        return
    names: set[str] = set()
    for i, port in enumerate(ports):
        port = port if isinstance(port, dict) else {}
        name = str(port.get("name") or "")
        if name:
            for message in dns1123_label(name):
                errors.add("Invalid", f"ports[{i}].name", message, name)
        if name in names:
            errors.add("Duplicate", f"ports[{i}].name", value=name)
        names.add(name)
        protocol = port.get("protocol")
        if protocol is None:
            errors.add("Required", f"ports[{i}].protocol")
        elif protocol not in PROTOCOLS:
            errors.add("NotSupported", f"ports[{i}].protocol",
                       "supported values: " + ", ".join(f'"{p}"' for p in PROTOCOLS), protocol)
        if port.get("appProtocol") is not None:
            for message in qualified_name(str(port["appProtocol"])):
                errors.add("Invalid", f"ports[{i}].appProtocol", message, port["appProtocol"])


def validate(obj: Obj, old: Obj | None) -> FieldErrors:
    """Default `obj` in place and return its field errors (`old`: the stored slice on an
    update)."""
    apply_defaults(obj)
    errors = FieldErrors()
    address_type = obj.get("addressType")
    if not address_type:
        errors.add("Required", "addressType")
    elif address_type not in ADDRESS_TYPES:
        errors.add("NotSupported", "addressType",
                   "supported values: " + ", ".join(f'"{t}"' for t in ADDRESS_TYPES),
                   address_type)
    _ports(list(obj.get("ports") or []), errors)
    endpoints = list(obj.get("endpoints") or [])
    if old is None or endpoints != list(old.get("endpoints") or []):
        if len(endpoints) > MAX_ENDPOINTS:
            errors.add("TooMany", "endpoints", f"must have at most {MAX_ENDPOINTS} items",
                       len(endpoints))
        else:
            for i, ep in enumerate(endpoints):
                _endpoint(ep if isinstance(ep, dict) else {}, f"endpoints[{i}]",
                          str(address_type or ""), errors)
    if old is not None and address_type != old.get("addressType"):
        errors.add("Invalid", "addressType", "field is immutable", address_type)
    return errors
