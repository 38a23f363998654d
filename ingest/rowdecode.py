"""Fast decoding of binlog rows events into exactly what mysql-replication returns.

mysql-replication decodes every column of every row through a chain of generic calls
(``_read_column_data`` -> ``__read_values_name`` -> type dispatch -> ``packet.read``):
tens of microseconds per row. Here, once per table version (the parsed TABLE_MAP's
``Table``) and columns-present bitmap, Python source is generated that decodes all the
rows of an event in one pass over the event's bytes (``struct`` / ``int.from_bytes`` on
the packet buffer, no per-column dispatch), and compiled.

The values, their types, the ``none_sources`` dicts and the dict layout are those of
mysql-replication 1.0.17 (``RowsEvent._read_column_data`` and helpers), quirks included
(e.g. TIME2's fraction read as a separate signed number, YEAR 0 -> 1900, zero dates ->
None). Correctness never depends on coverage:

* a table with a column type or metadata this module does not handle (MySQL's binary
  JSON, the pre-5.0 DECIMAL, NEWDATE, missing column names, ENUM without its values, ...)
  gets no decoder and its events are decoded by the library;
* a decoder that meets anything unexpected in the data (a value outside what the server
  writes, bytes left over or missing at the end of the event, a decode error) raises,
  and that event is decoded again by the library, so whatever the library returns or
  raises for it is what the caller gets.

``FastWriteRowsEvent`` / ``FastUpdateRowsEvent`` / ``FastDeleteRowsEvent`` are the
library's classes with ``rows`` decoded this way; ingest.binlog builds them (through the
library's packet wrapper or straight from the packet bytes).
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import struct
import threading

from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants import BINLOG, FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent

__all__ = [
    "TableDecoder",
    "decoder_for",
    "FastWriteRowsEvent",
    "FastUpdateRowsEvent",
    "FastDeleteRowsEvent",
    "FAST_ROWS_CLASSES",
    "STOCK_ROWS_CLASSES",
    "STATS",
]


class _Fallback(Exception):
    """The generated decoder met data it does not reproduce exactly: use the library."""


#: counters (events decoded natively / by the library, and why), for tests and benches
STATS = {"native_events": 0, "library_events": 0, "library_tables": 0, "data_fallbacks": 0}

# --------------------------------------------------------------------------- code generation

_FSP_BYTES = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
_COMPRESSED_BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
# struct code (signed, unsigned) and size of the fixed-width types
_FIXED = {
    FIELD_TYPE.TINY: ("b", "B", 1),
    FIELD_TYPE.SHORT: ("h", "H", 2),
    FIELD_TYPE.LONG: ("i", "I", 4),
    FIELD_TYPE.LONGLONG: ("q", "Q", 8),
    FIELD_TYPE.FLOAT: ("f", "f", 4),
    FIELD_TYPE.DOUBLE: ("d", "d", 8),
    FIELD_TYPE.YEAR: ("B", "B", 1),
}
_HANDLED = set(_FIXED) | {
    FIELD_TYPE.INT24,
    FIELD_TYPE.VARCHAR,
    FIELD_TYPE.STRING,
    FIELD_TYPE.NEWDECIMAL,
    FIELD_TYPE.BLOB,
    FIELD_TYPE.GEOMETRY,
    FIELD_TYPE.DATETIME,
    FIELD_TYPE.TIME,
    FIELD_TYPE.DATE,
    FIELD_TYPE.TIMESTAMP,
    FIELD_TYPE.DATETIME2,
    FIELD_TYPE.TIME2,
    FIELD_TYPE.TIMESTAMP2,
    FIELD_TYPE.ENUM,
    FIELD_TYPE.SET,
    FIELD_TYPE.BIT,
}

_EPOCH = datetime.datetime(1970, 1, 1)
_MAX_FUNCTIONS = 64  # per table version: one per kind and columns-present bitmap(s)


def _old_datetime(value):
    """mysql-replication's ``__read_datetime`` after the read (float arithmetic included)."""
    if value == 0:
        return None
    date = value / 1000000
    time = int(value % 1000000)
    year = int(date / 10000)
    month = int((date % 10000) / 100)
    day = int(date % 100)
    if year == 0 or month == 0 or day == 0:
        return None
    return datetime.datetime(
        year=year,
        month=month,
        day=day,
        hour=int(time / 10000),
        minute=int((time % 10000) / 100),
        second=int(time % 100),
    )


def _old_time(time):
    """mysql-replication's ``__read_time`` after the read."""
    return datetime.timedelta(hours=int(time / 10000), minutes=int((time % 10000) / 100), seconds=int(time % 100))


_BASE_NS = {
    "_fb": int.from_bytes,
    "_Decimal": decimal.Decimal,
    "_DCTX": decimal.Context(prec=1000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN),
    "_dt": datetime.datetime,
    "_date": datetime.date,
    "_td": datetime.timedelta,
    "_EPOCH": _EPOCH,
    "_utc": datetime.datetime.utcfromtimestamp,
    "_old_datetime": _old_datetime,
    "_old_time": _old_time,
    "_Fallback": _Fallback,
    "_format": format,
}


class Unsupported(Exception):
    pass


class _Gen:
    """Source for one decoder function (one rows-event kind and columns-present bitmap(s))."""

    def __init__(self, columns, encodings, errors: str):
        self.columns = columns
        self.encodings = encodings  # per column: None (utf-8 default), a codec name, or b"" (bytes)
        self.errors = errors
        self.ns = dict(_BASE_NS)
        self._consts = {}

    def const(self, prefix: str, value) -> str:
        key = (prefix, repr(value))
        name = self._consts.get(key)
        if name is None:
            name = f"_{prefix}{len(self._consts)}"
            self._consts[key] = name
            self.ns[name] = value
        return name

    def unpacker(self, fmt: str) -> str:
        name = self._consts.get(("struct", fmt))
        if name is None:
            name = f"_S{len(self._consts)}"
            self._consts[("struct", fmt)] = name
            self.ns[name] = struct.Struct(fmt).unpack_from
        return name

    # -- fractional seconds, as mysql-replication's __read_fsp (a signed big-endian read)
    @staticmethod
    def _fsp(fsp: int, src: str, ind: str, clamp: bool = False) -> list[str]:
        """Lines computing ``us`` from the low fsp bytes of the integer ``src`` (then
        shifted out of it). ``clamp``: a negative fraction may read as 0 (DATETIME2 and
        TIMESTAMP2, where the library only uses a positive one)."""
        k = _FSP_BYTES[fsp]
        if not k:
            return []
        bits = 8 * k
        scale = 10 ** (6 - fsp)
        lines = [f"{ind}f = {src} & {(1 << bits) - 1}", f"{ind}{src} >>= {bits}"]
        if clamp:
            frac = f"f // 10 * {scale}" if fsp % 2 else f"f * {scale}"
            return lines + [f"{ind}us = 0 if f >= {1 << (bits - 1)} else {frac}"]
        lines.append(f"{ind}if f >= {1 << (bits - 1)}: f -= {1 << bits}")
        if fsp % 2:
            lines.append(f"{ind}us = int(f / 10) * {scale}")
        else:
            lines.append(f"{ind}us = f * {scale}")
        return lines

    def _length(self, size: int, ind: str) -> list[str]:
        """Lines reading a little-endian unsigned length of ``size`` bytes into ``n``."""
        if size == 1:
            return [f"{ind}n = data[p]", f"{ind}p += 1"]
        if size == 2:
            return [f"{ind}n = data[p] | data[p + 1] << 8", f"{ind}p += 2"]
        if size == 3:
            return [f"{ind}n = data[p] | data[p + 1] << 8 | data[p + 2] << 16", f"{ind}p += 3"]
        if size == 4:
            return [f"{ind}n, = {self.unpacker('<I')}(data, p)", f"{ind}p += 4"]
        raise Unsupported(f"length size {size}")

    def column(self, i: int, v: str, ind: str) -> list[str]:
        """Lines decoding present, non-NULL column ``i`` at ``p`` into variable ``v``
        (advancing ``p``; adding to ``ns`` where the library records a none source)."""
        c = self.columns[i]
        t = c.type
        key = repr(c.name)
        if t in _FIXED:
            signed, unsigned, size = _FIXED[t]
            code = unsigned if c.unsigned else signed
            if t == FIELD_TYPE.YEAR:
                return [f"{ind}{v} = data[p] + 1900", f"{ind}p += 1"]
            if code == "B":
                return [f"{ind}{v} = data[p]", f"{ind}p += 1"]
            return [f"{ind}{v}, = {self.unpacker('<' + code)}(data, p)", f"{ind}p += {size}"]
        if t == FIELD_TYPE.INT24:
            return [f"{ind}{v} = _fb(data[p:p + 3], 'little', signed={not c.unsigned})", f"{ind}p += 3"]
        if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY):
            if t == FIELD_TYPE.BLOB or t == FIELD_TYPE.GEOMETRY:
                lines = self._length(c.length_size, ind)
            else:
                lines = self._length(2 if c.max_length > 255 else 1, ind)
            enc = self.encodings[i]
            if t == FIELD_TYPE.GEOMETRY:
                conv = ""
            elif enc == b"":
                # a codec Python does not know (e.g. 'binary'): the library keeps the bytes,
                # except that decoding b"" succeeds whatever the codec name: ''
                conv = " or ''"
            elif enc is None:
                conv = f".decode('utf-8', {self.errors!r})"
            else:
                conv = f".decode({enc!r}, {self.errors!r})"
            return lines + [f"{ind}q = p + n", f"{ind}{v} = data[p:q]{conv}", f"{ind}p = q"]
        if t == FIELD_TYPE.NEWDECIMAL:
            return self._decimal(c, v, ind)
        if t == FIELD_TYPE.DATETIME2:
            fsp = c.fsp
            size = 5 + _FSP_BYTES[fsp]
            lines = [f"{ind}x = _fb(data[p:p + {size}], 'big')", f"{ind}p += {size}"]
            lines += self._fsp(fsp, "x", ind, clamp=True)
            ext = ", us" if _FSP_BYTES[fsp] else ""
            lines += [
                f"{ind}ym = (x >> 22) & 131071",
                f"{ind}try:",
                f"{ind}    {v} = _dt(ym // 13, ym % 13, (x >> 17) & 31, (x >> 12) & 31, (x >> 6) & 63, x & 63{ext})",
                f"{ind}except ValueError:",
            ]
            if ext:
                lines.append(f"{ind}    if us > 999999: raise _Fallback")
            lines += [f"{ind}    {v} = None", f"{ind}    ns[{key}] = {NONE_SOURCE.OUT_OF_DATETIME2_RANGE!r}"]
            return lines
        if t == FIELD_TYPE.TIMESTAMP2:
            fsp = c.fsp
            size = 4 + _FSP_BYTES[fsp]
            lines = [f"{ind}x = _fb(data[p:p + {size}], 'big')", f"{ind}p += {size}"]
            lines += self._fsp(fsp, "x", ind, clamp=True)
            lines.append(f"{ind}if x >= 2147483648: x -= 4294967296")
            if _FSP_BYTES[fsp]:
                lines += [f"{ind}if us > 999999: raise _Fallback", f"{ind}{v} = _EPOCH + _td(0, x, us)"]
            else:
                lines.append(f"{ind}{v} = _EPOCH + _td(0, x)")
            return lines
        if t == FIELD_TYPE.TIME2:
            fsp = c.fsp
            size = 3 + _FSP_BYTES[fsp]
            lines = [f"{ind}x = _fb(data[p:p + {size}], 'big')", f"{ind}p += {size}"]
            lines += self._fsp(fsp, "x", ind)
            us = ", us" if _FSP_BYTES[fsp] else ""
            # the library reads the 3 bytes as a signed int; bit 23 set (non-negative) keeps
            # the same low 24 bits, so the raw value serves; negative: 2's complement again
            lines += [
                f"{ind}if x & 8388608:",
                f"{ind}    {v} = _td(0, ((x >> 12) & 1023) * 3600 + ((x >> 6) & 63) * 60 + (x & 63){us})",
                f"{ind}else:",
                f"{ind}    x = -x",
                f"{ind}    {v} = _td(0, ((x >> 12) & 1023) * 3600 + ((x >> 6) & 63) * 60 + (x & 63){us}) * -1",
            ]
            return lines
        if t == FIELD_TYPE.DATE:
            return [
                f"{ind}x = data[p] | data[p + 1] << 8 | data[p + 2] << 16",
                f"{ind}p += 3",
                f"{ind}y = x >> 9",
                f"{ind}m = (x >> 5) & 15",
                f"{ind}d = x & 31",
                f"{ind}if y and m and d:",
                f"{ind}    {v} = _date(y, m, d)",
                f"{ind}else:",
                f"{ind}    {v} = None",
                f"{ind}    ns[{key}] = {NONE_SOURCE.OUT_OF_DATE_RANGE!r}",
            ]
        if t == FIELD_TYPE.TIME:
            return [f"{ind}{v} = _old_time(data[p] | data[p + 1] << 8 | data[p + 2] << 16)", f"{ind}p += 3"]
        if t == FIELD_TYPE.DATETIME:
            return [
                f"{ind}{v}, = {self.unpacker('<Q')}(data, p)",
                f"{ind}p += 8",
                f"{ind}{v} = _old_datetime({v})",
                f"{ind}if {v} is None: ns[{key}] = {NONE_SOURCE.OUT_OF_DATETIME_RANGE!r}",
            ]
        if t == FIELD_TYPE.TIMESTAMP:
            return [f"{ind}{v} = _utc({self.unpacker('<I')}(data, p)[0])", f"{ind}p += 4"]
        if t == FIELD_TYPE.ENUM:
            values = self.const("E", list(c.enum_values))
            if c.size == 1:
                return [f"{ind}{v} = {values}[data[p]]", f"{ind}p += 1"]
            if c.size == 2:
                return [f"{ind}{v} = {values}[data[p] | data[p + 1] << 8]", f"{ind}p += 2"]
            raise Unsupported(f"ENUM size {c.size}")
        if t == FIELD_TYPE.SET:
            if not 1 <= c.size <= 8:
                raise Unsupported(f"SET size {c.size}")
            lines = [f"{ind}p += {c.size}"]
            if c.set_values:
                pairs = self.const("P", tuple((1 << idx, val) for idx, val in enumerate(c.set_values)))
                lines = [
                    f"{ind}x = _fb(data[p:p + {c.size}], 'little')",
                    f"{ind}p += {c.size}",
                    f"{ind}{v} = {{val for bit, val in {pairs} if x & bit}}",
                    f"{ind}if not {v}:",
                ]
                ind2 = ind + "    "
            else:
                ind2 = ind
            return lines + [f"{ind2}{v} = None", f"{ind2}ns[{key}] = {NONE_SOURCE.EMPTY_SET!r}"]
        if t == FIELD_TYPE.BIT:
            nbytes, bits = c.bytes, c.bits
            if not 1 <= bits <= 64 or nbytes != (bits + 7) // 8:
                raise Unsupported(f"BIT({bits}) in {nbytes} bytes")
            return [
                f"{ind}{v} = _format(_fb(data[p:p + {nbytes}], 'big') & {(1 << bits) - 1}, '0{bits}b')",
                f"{ind}p += {nbytes}",
            ]
        raise Unsupported(f"column type {t}")

    def _decimal(self, c, v: str, ind: str) -> list[str]:
        precision, decimals = c.precision, c.decimals
        if not (0 <= decimals <= precision) or precision <= 0:
            raise Unsupported(f"DECIMAL({precision},{decimals})")
        integral = precision - decimals
        uncomp_integral, comp_integral = divmod(integral, 9)
        uncomp_fractional, comp_fractional = divmod(decimals, 9)
        # digit groups, most significant first: (bytes, format in the library's digit
        # string, largest valid value)
        groups = []
        if _COMPRESSED_BYTES[comp_integral]:
            groups.append((_COMPRESSED_BYTES[comp_integral], "", 10**comp_integral - 1))
        groups += [(4, ":09d", 999999999)] * uncomp_integral
        groups.append((0, ".", 0))
        groups += [(4, ":09d", 999999999)] * uncomp_fractional
        if _COMPRESSED_BYTES[comp_fractional]:
            groups.append((_COMPRESSED_BYTES[comp_fractional], f":0{comp_fractional}d", 10**comp_fractional - 1))
        size = sum(g[0] for g in groups)
        sign = 1 << (8 * size - 1)
        allbut = (1 << (8 * size)) - 1 ^ sign
        lines = [
            f"{ind}x = _fb(data[p:p + {size}], 'big')",
            f"{ind}p += {size}",
            f"{ind}if x & {sign}:",
            f"{ind}    x ^= {sign}",
            f"{ind}    s = ''",
            f"{ind}else:",
            f"{ind}    x ^= {allbut}",
            f"{ind}    s = '-'",
        ]
        # the library reads each group as a signed big-endian number (XOR -1 when negative):
        # the same digits as the unsigned reading here exactly when the group is in range
        checks = []
        shift = size * 8
        for k, (nbytes, fmt, largest) in enumerate(groups):
            if fmt == ".":
                continue
            shift -= nbytes * 8
            expr = f"x >> {shift}" if shift else "x"
            if shift + nbytes * 8 < size * 8:
                expr = f"({expr}) & {(1 << (nbytes * 8)) - 1}"
            lines.append(f"{ind}g{k} = {expr}")
            checks.append(f"g{k} > {largest}")
        lines.append(f"{ind}if {' or '.join(checks)}: raise _Fallback")
        # the library parses the digit string; the unscaled integer scaled by the column's
        # decimals is the same Decimal (digits and exponent), except for '-0' (library path)
        unscaled = None
        for k, (nbytes, fmt, largest) in enumerate(groups):
            if fmt == ".":
                continue
            digits = len(str(largest))
            unscaled = f"g{k}" if unscaled is None else f"({unscaled}) * {10**digits} + g{k}"
        scaled = f"_Decimal({{}}).scaleb({-decimals}, _DCTX)" if decimals else "_Decimal({})"
        lines += [
            f"{ind}if s:",
            f"{ind}    x = {unscaled}",
            f"{ind}    if not x: raise _Fallback",
            f"{ind}    {v} = {scaled.format('-x')}",
            f"{ind}else:",
            f"{ind}    {v} = {scaled.format(unscaled)}",
        ]
        return lines

    def image(self, bitmap: bytes, out: str, ind: str) -> list[str]:
        """Lines decoding one row image (null bitmap + present columns) into the dicts
        ``{out}v`` (values) and ``{out}n`` (none sources)."""
        cols = self.columns
        present = [i for i in range(len(cols)) if bitmap[i >> 3] & (1 << (i & 7))]
        nb_len = (len(present) + 7) // 8
        lines = []
        if nb_len == 1:
            lines += [f"{ind}nb = data[p]", f"{ind}p += 1"]
        elif nb_len:
            lines += [f"{ind}nb = _fb(data[p:p + {nb_len}], 'little')", f"{ind}p += {nb_len}"]
        else:
            lines.append(f"{ind}nb = 0")
        lines.append(f"{ind}ns = {{}}")
        names = [repr(c.name) for c in cols]
        # with NULLs: per column test of the null bitmap
        lines.append(f"{ind}if nb:")
        k = 0
        for i in range(len(cols)):
            if i not in present:
                lines += [f"{ind}    v{i} = None", f"{ind}    ns[{names[i]}] = {NONE_SOURCE.COLS_BITMAP!r}"]
                continue
            lines += [
                f"{ind}    if nb & {1 << k}:",
                f"{ind}        v{i} = None",
                f"{ind}        ns[{names[i]}] = {NONE_SOURCE.NULL!r}",
                f"{ind}    else:",
            ]
            lines += self.column(i, f"v{i}", ind + "        ")
            k += 1
        # no NULL: straight-line, runs of fixed-width columns in one struct call
        lines.append(f"{ind}else:")
        run: list[int] = []

        def flush():
            if not run:
                return
            if len(run) == 1:
                lines.extend(self.column(run[0], f"v{run[0]}", ind + "    "))
            else:
                fmt = "<" + "".join(_FIXED[cols[j].type][1 if cols[j].unsigned else 0] for j in run)
                size = struct.calcsize(fmt)
                lines.append(f"{ind}    {', '.join(f'v{j}' for j in run)}, = {self.unpacker(fmt)}(data, p)")
                lines.append(f"{ind}    p += {size}")
                for j in run:
                    if cols[j].type == FIELD_TYPE.YEAR:
                        lines.append(f"{ind}    v{j} += 1900")
            run.clear()

        for i in range(len(cols)):
            if i not in present:
                flush()
                lines += [f"{ind}    v{i} = None", f"{ind}    ns[{names[i]}] = {NONE_SOURCE.COLS_BITMAP!r}"]
            elif cols[i].type in _FIXED:
                run.append(i)
            else:
                flush()
                lines += self.column(i, f"v{i}", ind + "    ")
        flush()
        lines.append(f"{ind}{out}v = {{{', '.join(f'{names[i]}: v{i}' for i in range(len(cols)))}}}")
        lines.append(f"{ind}{out}n = ns")
        return lines

    def function(self, kind: str, bitmap1: bytes, bitmap2: bytes | None) -> str:
        lines = ["def decode(data, p, end):", "    rows = []", "    append = rows.append", "    while p < end:"]
        ind = "        "
        if kind == "update":
            lines += self.image(bitmap1, "b", ind)
            lines += self.image(bitmap2, "a", ind)
            lines.append(
                f"{ind}append({{'before_values': bv, 'before_none_sources': bn, "
                f"'after_values': av, 'after_none_sources': an}})"
            )
        else:
            lines += self.image(bitmap1, "r", ind)
            lines.append(f"{ind}append({{'values': rv, 'none_sources': rn}})")
        lines += ["    if p != end:", "        raise _Fallback", "    return rows"]
        return "\n".join(lines) + "\n"


def _encodings(columns) -> list:
    """Per column, what mysql-replication's ``__read_string`` decodes with: None (no
    charset known: utf-8), a codec name, or b"" (the codec is unknown to Python: bytes)."""
    out = []
    for c in columns:
        name = getattr(c, "character_set_name", None)
        if c.type not in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB) or name is None:
            out.append(None)
            continue
        enc = RowsEvent.charset_to_encoding(name)
        try:
            codecs.lookup(enc)
        except LookupError:
            out.append(b"")
        else:
            out.append(enc)
    return out


class TableDecoder:
    """Generated row decoders for one table version (one parsed TABLE_MAP)."""

    def __init__(self, columns, ignore_decode_errors: bool = False):
        self.columns = list(columns)
        self.errors = "ignore" if ignore_decode_errors else "strict"
        self.reason = None
        self._functions: dict = {}
        self._sources: dict = {}
        self._lock = threading.Lock()
        try:
            self._check()
            self._encodings = _encodings(self.columns)
            # generate the full-image function now, so an unsupported detail shows here
            self.function("write", _full_bitmap(len(self.columns)), None)
        except Unsupported as e:
            self.reason = str(e)

    @property
    def supported(self) -> bool:
        return self.reason is None

    def _check(self) -> None:
        names = set()
        for c in self.columns:
            if c.type not in _HANDLED:
                raise Unsupported(f"column type {c.type}")
            if not c.name or not isinstance(c.name, str) or c.name in names:
                raise Unsupported("column names unknown (no binlog_row_metadata=FULL?)")
            names.add(c.name)
            if (
                c.type in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIME2, FIELD_TYPE.TIMESTAMP2)
                and getattr(c, "fsp", None) not in _FSP_BYTES
            ):
                raise Unsupported(f"fsp {getattr(c, 'fsp', None)}")
            if c.type == FIELD_TYPE.ENUM and not c.enum_values:
                raise Unsupported("ENUM values unknown")

    def function(self, kind: str, bitmap1: bytes, bitmap2: bytes | None = None):
        """The decoder ``decode(data, pos, end) -> rows`` for rows events of ``kind``
        ('write', 'delete' or 'update') with these columns-present bitmaps (None once
        the table has _MAX_FUNCTIONS of them: the library decodes other shapes)."""
        key = (kind == "update", bitmap1, bitmap2)
        fn = self._functions.get(key)
        if fn is None:
            with self._lock:
                fn = self._functions.get(key)
                if fn is None:
                    if len(self._functions) >= _MAX_FUNCTIONS:  # partial images of ever new shapes
                        return None
                    gen = _Gen(self.columns, self._encodings, self.errors)
                    src = gen.function("update" if kind == "update" else "write", bitmap1, bitmap2)
                    ns = gen.ns
                    exec(compile(src, f"<rowdecode {kind}>", "exec"), ns)
                    fn = ns["decode"]
                    self._sources[key] = src
                    self._functions[key] = fn
        return fn

    def source(self, kind: str, bitmap1: bytes, bitmap2: bytes | None = None) -> str:
        self.function(kind, bitmap1, bitmap2)
        return self._sources[(kind == "update", bitmap1, bitmap2)]


def _full_bitmap(n: int) -> bytes:
    b = bytearray((n + 7) // 8)
    for i in range(n):
        b[i >> 3] |= 1 << (i & 7)
    return bytes(b)


_signature_cache: dict = {}


def _signature(table) -> tuple:
    sig = []
    for c in table.columns:
        d = c.__dict__
        sig.append(
            tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items() if not k.startswith("_")))
        )
    return tuple(sig)


def decoder_for(table, ignore_decode_errors: bool = False) -> TableDecoder | None:
    """The decoder of a parsed table map's ``Table`` (cached on it, and by the columns'
    description for Table objects that are parsed anew), or None if the library must
    decode this table."""
    attr = "_rd_decoder_ign" if ignore_decode_errors else "_rd_decoder"
    dec = table.__dict__.get(attr)
    if dec is None:
        try:
            sig = (ignore_decode_errors, _signature(table))
        except TypeError:  # unhashable metadata: no cache by signature
            sig = None
        dec = _signature_cache.get(sig) if sig is not None else None
        if dec is None:
            dec = TableDecoder(table.columns, ignore_decode_errors)
            if not dec.supported:
                STATS["library_tables"] += 1
            if sig is not None:
                if len(_signature_cache) > 4096:
                    _signature_cache.clear()
                _signature_cache[sig] = dec
        table.__dict__[attr] = dec
    return dec if dec.supported else None


# --------------------------------------------------------------------------- events

STOCK_ROWS_CLASSES = {
    BINLOG.WRITE_ROWS_EVENT_V1: WriteRowsEvent,
    BINLOG.WRITE_ROWS_EVENT_V2: WriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V1: UpdateRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V2: UpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V1: DeleteRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V2: DeleteRowsEvent,
}


class _FastRows:
    """Mixin for the library's rows event classes: ``rows`` decoded by a TableDecoder.

    Built either by the library (``__init__`` through a BinLogPacketWrapper: the row data
    is read from the wrapper's packet, which is left untouched, so the library can still
    decode it) or by ingest.binlog straight from the packet bytes (``_rd_data``,
    ``_rd_pos``, ``_rd_end``, ``_rd_fn`` set; no wrapper: ``_rd_library_rows`` rebuilds
    the library's event from the bytes when the library must decode)."""

    _rd_kind = "write"
    _RowsEvent__rows = None
    _rd_data = None
    _rd_fn = None
    _rd_pos = 0
    _rd_end = 0
    _rd_use_checksum = False
    # what BinLogEvent.__init__ sets and the lean construction leaves to the class
    _verify_checksum = False
    _is_event_valid = None
    _processed = True
    complete = True

    @property
    def rows(self):
        rows = self._RowsEvent__rows
        if rows is None:
            fn = self._rd_fn
            if fn is not None and self.complete:
                try:
                    rows = fn(self._rd_data, self._rd_pos, self._rd_end)
                except Exception:  # anything unexpected: the library decides (and raises if it does)
                    STATS["data_fallbacks"] += 1
                    self._fetch_rows()
                    return self._RowsEvent__rows
                STATS["native_events"] += 1
                self._RowsEvent__rows = rows
                return rows
            self._fetch_rows()
            rows = self._RowsEvent__rows
        return rows

    def _fetch_rows(self):
        if not self.complete:
            self._RowsEvent__rows = []
            return
        rows = self._rd_decode() if self._rd_data is None else None
        if rows is not None:
            STATS["native_events"] += 1
            self._RowsEvent__rows = rows
            return
        STATS["library_events"] += 1
        if self._rd_data is not None:
            self._RowsEvent__rows = self._rd_library_rows()
        else:
            RowsEvent._fetch_rows(self)

    def _rd_decode(self):
        """Decode an event built by the library's __init__ (from its packet wrapper)."""
        table = self.table_map.get(self.table_id)
        if table is None:
            return None
        dec = decoder_for(table, self._ignore_decode_errors)
        if dec is None:
            return None
        pk = self.packet
        if getattr(pk, "_BinLogPacketWrapper__data_buffer", b"x"):
            return None
        raw = pk.packet
        data, pos = raw._data, raw._position
        end = pos + self.event_size - pk.read_bytes
        kind = self._rd_kind
        fn = dec.function(kind, self.columns_present_bitmap, self.columns_present_bitmap2 if kind == "update" else None)
        if fn is None:
            return None
        try:
            return fn(data, pos, end)
        except Exception:  # anything unexpected: the library decides (and raises if it does)
            STATS["data_fallbacks"] += 1
            return None

    def _rd_library_rows(self):
        """Decode with the library: rebuild its event from the packet bytes."""
        stock = STOCK_ROWS_CLASSES[self.event_type]
        wrapper = BinLogPacketWrapper(
            MysqlPacket(self._rd_data, "utf8"),
            {self.table_id: self._rd_table},
            self._ctl_connection,
            self.mysql_version,
            self._rd_use_checksum,
            frozenset([stock]),
            None,
            None,
            None,
            None,
            False,
            self._ignore_decode_errors,
            False,
            True,
            False,
            False,
            self._post_header_lengths,
        )
        event = wrapper.event
        if event is None:  # cannot happen: the table is in the map given
            raise RuntimeError("mysql-replication did not build the rows event")
        return event.rows


class FastWriteRowsEvent(_FastRows, WriteRowsEvent):
    _rd_kind = "write"


class FastUpdateRowsEvent(_FastRows, UpdateRowsEvent):
    _rd_kind = "update"


class FastDeleteRowsEvent(_FastRows, DeleteRowsEvent):
    _rd_kind = "delete"


FAST_ROWS_CLASSES = {
    BINLOG.WRITE_ROWS_EVENT_V1: FastWriteRowsEvent,
    BINLOG.WRITE_ROWS_EVENT_V2: FastWriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V1: FastUpdateRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V2: FastUpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V1: FastDeleteRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V2: FastDeleteRowsEvent,
}
