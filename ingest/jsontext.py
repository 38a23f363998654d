"""JSON text exactly as Kafka's ``JsonConverter`` (Jackson) writes it, and numbers as Java
prints them (pure).

* ``json_str``: strings escaped like Jackson: only ``"``, ``\\`` and U+0000..U+001F, with
  \\b \\t \\n \\f \\r short forms and upper-case \\u00XX otherwise; non-ASCII stays raw,
  characters outside the BMP become UTF-16 surrogate pairs.
* ``java_double_str`` / ``java_float_str``: ``Double.toString`` / ``Float.toString``
  ("1.0E-5", "1.7976931348623157E308", "3.14").
* ``dumps``: compact JSON of a JSON-model value with those rules (``JavaFloat`` for float32,
  ``RawJSON`` for pre-serialised text).
* ``mysql_json_text``: a MySQL binary JSON value re-printed as Debezium's binlog client does.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import re
import struct
from decimal import Decimal
from json.encoder import encode_basestring as _py_encode_basestring
from typing import Any, Mapping

_JSON_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}


def _slow_json_str(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if o < 0x20 or o in (0x22, 0x5C):
            out.append(_JSON_ESCAPES.get(o) or "\\u%04X" % o)
        elif o > 0xFFFF:
            c = o - 0x10000
            out.append("\\u%04X\\u%04X" % (0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF)))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _surrogates(m: re.Match) -> str:
    c = ord(m.group()) - 0x10000
    return "\\u%04X\\u%04X" % (0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF))


def json_str(s: str) -> str:
    """A JSON string literal exactly as Jackson (Kafka's JsonConverter) writes it: raw
    UTF-8 for non-ASCII BMP characters, characters outside the BMP (emoji) as escaped
    UTF-16 surrogate pairs (\\uD83D\\uDE00), control characters as \\b \\t \\n \\f \\r
    or upper-case \\u00XX."""
    out = _py_encode_basestring(s)
    if "\\u00" in out:  # rare: control characters; Python writes lower-case hex
        return _slow_json_str(s)
    if not s.isascii() and _ASTRAL.search(s):
        return _ASTRAL.sub(_surrogates, out)
    return out


def _java_sci_digits(x: float) -> tuple[str, int]:
    """Shortest round-trip significant digits of x (>0) and decimal exponent e such that
    x = 0.d1d2... * 10**e."""
    r = repr(x)
    if "e" in r or "E" in r:
        mant, exp = r.lower().split("e")
        exp = int(exp)
    else:
        mant, exp = r, 0
    if "." in mant:
        ip, fp = mant.split(".")
    else:
        ip, fp = mant, ""
    digits = (ip + fp).lstrip("0")
    # position of the decimal point relative to the digit string
    lead = len(ip + fp) - len((ip + fp).lstrip("0"))
    e = len(ip) - lead + exp
    digits = digits.rstrip("0") or "0"
    return digits, e


def _format_java(digits: str, e: int, negative: bool) -> str:
    """Java's Double/Float.toString layout of 0.<digits> * 10**e."""
    sign = "-" if negative else ""
    # value v = 0.d1d2.. * 10^e ; scientific exponent = e - 1
    if -2 <= e <= 7:  # 1e-3 <= v < 1e7
        if e <= 0:
            return f"{sign}0.{'0' * (-e)}{digits}"
        if len(digits) <= e:
            return f"{sign}{digits}{'0' * (e - len(digits))}.0"
        return f"{sign}{digits[:e]}.{digits[e:]}"
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}E{e - 1}"


def _two_digit_closer(x: float, digits: str, e: int, f32: bool) -> tuple[str, int]:
    """JDK 19+ rule: when the shortest decimal has one digit, a closer two-digit decimal
    that also rounds to x wins (only matters for tiny subnormals, e.g. 4.9E-324)."""
    exact = Decimal(x)
    best, best_err = digits, abs(Decimal(f"0.{digits}E{e}") - exact)
    base = int(digits) * 10
    for k in range(-9, 10):
        cand = base + k
        if cand <= 0 or cand >= 100:
            continue
        text = f"0.{cand:02d}E{e}"
        v = float(text)
        if f32:
            try:
                v = struct.unpack("<f", struct.pack("<f", v))[0]
            except OverflowError:
                continue
        if v == x:
            err = abs(Decimal(text) - exact)
            if err < best_err:
                best, best_err = f"{cand:02d}".rstrip("0"), err
    return best, e


def java_double_str(x: float) -> str:
    """``Double.toString(x)`` (shortest round-trip digits, Java layout: 1.0E7, 1.0E-5,
    0.001, 123.0)."""
    if 1e-3 <= x < 1e7 or -1e7 < x <= -1e-3:
        return repr(x)  # Python's repr is the same shortest digits and plain layout here
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    neg = x < 0
    ax = -x if neg else x
    digits, e = _java_sci_digits(ax)
    if len(digits) == 1 and ax < 2.2250738585072014e-308:
        digits, e = _two_digit_closer(ax, digits, e, False)
    return _format_java(digits, e, neg)


def java_float_str(x: float) -> str:
    """``Float.toString((float) x)`` for a value that is exactly a float32."""
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    f = struct.unpack("<f", struct.pack("<f", x))[0]
    neg = f < 0
    af = -f if neg else f
    for p in range(1, 10):
        s = "%.*e" % (p - 1, af)
        try:
            if struct.unpack("<f", struct.pack("<f", float(s)))[0] == af:
                break
        except OverflowError:  # rounded above the float32 range
            continue
    mant, exp = s.split("e")
    digits = mant.replace(".", "").rstrip("0") or "0"
    e = int(exp) + 1
    if len(digits) == 1 and af < 1.1754943508222875e-38:
        digits, e = _two_digit_closer(af, digits, e, True)
    return _format_java(digits, e, neg)


class JavaFloat(float):
    """A float serialised as a Java float32 by ``dumps`` (schema type "float")."""


def dumps(obj: Any) -> str:
    """Compact JSON like Kafka's JsonConverter (Jackson): no spaces, raw UTF-8, Java number
    formatting (floats: Double.toString; ``JavaFloat``: Float.toString). ``bytes`` become
    base64 strings (as JsonConverter writes BYTES)."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    t = type(obj)
    if t is str:
        return json_str(obj)
    if t is int:
        return str(obj)
    if t is JavaFloat:
        return java_float_str(obj)
    if t is float:
        return java_double_str(obj)
    if t is dict or isinstance(obj, Mapping):
        return "{" + ",".join(json_str(str(k)) + ":" + dumps(v) for k, v in obj.items()) + "}"
    if t in (list, tuple):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    if t in (bytes, bytearray, memoryview):
        return '"' + base64.b64encode(bytes(obj)).decode("ascii") + '"'
    if isinstance(obj, RawJSON):
        return obj.text
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, int):
        return str(int(obj))
    if isinstance(obj, float):
        return java_double_str(float(obj))
    if isinstance(obj, str):
        return json_str(str(obj))
    raise TypeError(f"cannot serialise {t.__name__}")


class RawJSON:
    """Pre-serialised JSON text embedded verbatim by ``dumps``."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"RawJSON({self.text!r})"


def mysql_json_text(obj: Any) -> str:
    """A MySQL binary JSON value as decoded by mysql-replication, printed like Debezium's
    binlog client (JsonStringFormatter): compact, keys in stored order, doubles via
    Double.toString unless that uses an exponent (then the exact decimal expansion).
    Only MySQL needs this; MariaDB's JSON is text and is passed through."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, dict):
        parts = []
        for k, v in obj.items():
            if isinstance(k, (bytes, bytearray)):
                k = bytes(k).decode("utf-8")
            parts.append(_slow_json_str(str(k)) + ":" + mysql_json_text(v))
        return "{" + ",".join(parts) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(mysql_json_text(v) for v in obj) + "]"
    if isinstance(obj, (bytes, bytearray)):
        return _slow_json_str(bytes(obj).decode("utf-8"))
    if isinstance(obj, str):
        return _slow_json_str(obj)
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        s = java_double_str(obj)
        return format(Decimal(obj), "f") if "E" in s else s
    if isinstance(obj, Decimal):
        return format(obj, "f")
    if isinstance(obj, _dt.datetime):
        s = obj.strftime("%Y-%m-%d %H:%M:%S")
        if obj.microsecond:
            s += "." + f"{obj.microsecond:06d}".rstrip("0")
        return '"' + s + '"'
    if isinstance(obj, _dt.date):
        return '"' + obj.strftime("%Y-%m-%d") + '"'
    if isinstance(obj, _dt.timedelta):
        us = (obj.days * 86400 + obj.seconds) * 1_000_000 + obj.microseconds
        sign = "-" if us < 0 else ""
        us = abs(us)
        h, rem = divmod(us, 3_600_000_000)
        m, rem = divmod(rem, 60_000_000)
        sec, micro = divmod(rem, 1_000_000)
        s = f"{sign}{h:02d}:{m:02d}:{sec:02d}"
        if micro:
            s += "." + f"{micro:06d}".rstrip("0")
        return '"' + s + '"'
    return _slow_json_str(str(obj))
