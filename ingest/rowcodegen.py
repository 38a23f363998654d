"""Python source for a table's rows-event decoders: one function per event kind and
columns-present bitmap(s), decoding exactly as mysql-replication does
(ingest/rowdecode.py compiles and runs them)."""

from __future__ import annotations

import datetime
import decimal
import struct

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from cdc.errors import CdcError


class _Fallback(CdcError):
    """The generated decoder met data it does not reproduce exactly: use the library."""


FSP_BYTES = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}


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


HANDLED_TYPES = set(_FIXED) | {
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


class Unsupported(CdcError):
    pass


class DecoderSource:
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
        k = FSP_BYTES[fsp]
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
        code = _COLUMN_CODE.get(c.type)
        if code is None:
            raise Unsupported(f"column type {c.type}")
        return code(self, i, c, v, ind)

    def _fixed(self, i, c, v, ind):
        signed, unsigned, size = _FIXED[c.type]
        code = unsigned if c.unsigned else signed
        if c.type == FIELD_TYPE.YEAR:
            return [f"{ind}{v} = data[p] + 1900", f"{ind}p += 1"]
        if code == "B":
            return [f"{ind}{v} = data[p]", f"{ind}p += 1"]
        return [f"{ind}{v}, = {self.unpacker('<' + code)}(data, p)", f"{ind}p += {size}"]

    def _int24(self, i, c, v, ind):
        return [f"{ind}{v} = _fb(data[p:p + 3], 'little', signed={not c.unsigned})", f"{ind}p += 3"]

    def _string(self, i, c, v, ind):
        t = c.type
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

    def _newdecimal(self, i, c, v, ind):
        return self._decimal(c, v, ind)

    def _datetime2(self, i, c, v, ind):
        fsp = c.fsp
        size = 5 + FSP_BYTES[fsp]
        lines = [f"{ind}x = _fb(data[p:p + {size}], 'big')", f"{ind}p += {size}"]
        lines += self._fsp(fsp, "x", ind, clamp=True)
        ext = ", us" if FSP_BYTES[fsp] else ""
        lines += [
            f"{ind}ym = (x >> 22) & 131071",
            f"{ind}try:",
            f"{ind}    {v} = _dt(ym // 13, ym % 13, (x >> 17) & 31, (x >> 12) & 31, (x >> 6) & 63, x & 63{ext})",
            f"{ind}except ValueError:",
        ]
        if ext:
            lines.append(f"{ind}    if us > 999999: raise _Fallback")
        lines += [f"{ind}    {v} = None", f"{ind}    ns[{c.name!r}] = {NONE_SOURCE.OUT_OF_DATETIME2_RANGE!r}"]
        return lines

    def _timestamp2(self, i, c, v, ind):
        fsp = c.fsp
        size = 4 + FSP_BYTES[fsp]
        lines = [f"{ind}x = _fb(data[p:p + {size}], 'big')", f"{ind}p += {size}"]
        lines += self._fsp(fsp, "x", ind, clamp=True)
        lines.append(f"{ind}if x >= 2147483648: x -= 4294967296")
        if FSP_BYTES[fsp]:
            lines += [f"{ind}if us > 999999: raise _Fallback", f"{ind}{v} = _EPOCH + _td(0, x, us)"]
        else:
            lines.append(f"{ind}{v} = _EPOCH + _td(0, x)")
        return lines

    def _time2(self, i, c, v, ind):
        fsp = c.fsp
        size = 3 + FSP_BYTES[fsp]
        lines = [f"{ind}x = _fb(data[p:p + {size}], 'big')", f"{ind}p += {size}"]
        lines += self._fsp(fsp, "x", ind)
        us = ", us" if FSP_BYTES[fsp] else ""
        # the library reads the 3 bytes as a signed int; bit 23 set (non-negative) keeps
        # the same low 24 bits, so the raw value serves; negative: 2's complement again
        return lines + [
            f"{ind}if x & 8388608:",
            f"{ind}    {v} = _td(0, ((x >> 12) & 1023) * 3600 + ((x >> 6) & 63) * 60 + (x & 63){us})",
            f"{ind}else:",
            f"{ind}    x = -x",
            f"{ind}    {v} = _td(0, ((x >> 12) & 1023) * 3600 + ((x >> 6) & 63) * 60 + (x & 63){us}) * -1",
        ]

    def _date(self, i, c, v, ind):
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
            f"{ind}    ns[{c.name!r}] = {NONE_SOURCE.OUT_OF_DATE_RANGE!r}",
        ]

    def _time(self, i, c, v, ind):
        return [f"{ind}{v} = _old_time(data[p] | data[p + 1] << 8 | data[p + 2] << 16)", f"{ind}p += 3"]

    def _datetime(self, i, c, v, ind):
        return [
            f"{ind}{v}, = {self.unpacker('<Q')}(data, p)",
            f"{ind}p += 8",
            f"{ind}{v} = _old_datetime({v})",
            f"{ind}if {v} is None: ns[{c.name!r}] = {NONE_SOURCE.OUT_OF_DATETIME_RANGE!r}",
        ]

    def _timestamp(self, i, c, v, ind):
        return [f"{ind}{v} = _utc({self.unpacker('<I')}(data, p)[0])", f"{ind}p += 4"]

    def _enum(self, i, c, v, ind):
        values = self.const("E", list(c.enum_values))
        if c.size == 1:
            return [f"{ind}{v} = {values}[data[p]]", f"{ind}p += 1"]
        if c.size == 2:
            return [f"{ind}{v} = {values}[data[p] | data[p + 1] << 8]", f"{ind}p += 2"]
        raise Unsupported(f"ENUM size {c.size}")

    def _set(self, i, c, v, ind):
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
        return lines + [f"{ind2}{v} = None", f"{ind2}ns[{c.name!r}] = {NONE_SOURCE.EMPTY_SET!r}"]

    def _bit(self, i, c, v, ind):
        nbytes, bits = c.bytes, c.bits
        if not 1 <= bits <= 64 or nbytes != (bits + 7) // 8:
            raise Unsupported(f"BIT({bits}) in {nbytes} bytes")
        return [
            f"{ind}{v} = _format(_fb(data[p:p + {nbytes}], 'big') & {(1 << bits) - 1}, '0{bits}b')",
            f"{ind}p += {nbytes}",
        ]

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


# one code writer per column type (the library's per-type read in pymysqlreplication.row_event)
_COLUMN_CODE = {
    **{t: DecoderSource._fixed for t in _FIXED},
    FIELD_TYPE.INT24: DecoderSource._int24,
    **{t: DecoderSource._string for t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY)},
    FIELD_TYPE.NEWDECIMAL: DecoderSource._newdecimal,
    FIELD_TYPE.DATETIME2: DecoderSource._datetime2,
    FIELD_TYPE.TIMESTAMP2: DecoderSource._timestamp2,
    FIELD_TYPE.TIME2: DecoderSource._time2,
    FIELD_TYPE.DATE: DecoderSource._date,
    FIELD_TYPE.TIME: DecoderSource._time,
    FIELD_TYPE.DATETIME: DecoderSource._datetime,
    FIELD_TYPE.TIMESTAMP: DecoderSource._timestamp,
    FIELD_TYPE.ENUM: DecoderSource._enum,
    FIELD_TYPE.SET: DecoderSource._set,
    FIELD_TYPE.BIT: DecoderSource._bit,
}
