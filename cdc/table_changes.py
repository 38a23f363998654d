"""Debezium's ``tableChanges`` JSON of a table (the schema-change topic's description of a
table version): written by ingest, read back by the merger's catalog. Pure."""

from __future__ import annotations

from cdc.tablespec import ColumnSpec, TableSpec

#: java.sql.Types codes Debezium's MySQL DDL parser assigns
_JDBC = {
    "boolean": 16,
    "bit": -7,
    "tinyint": 5,
    "smallint": 5,
    "mediumint": 4,
    "int": 4,
    "bigint": -5,
    "serial": -5,
    "decimal": 3,
    "numeric": 2,
    "float": 6,
    "double": 8,
    "real": 7,
    "char": 1,
    "varchar": 12,
    "tinytext": 12,
    "text": 12,
    "mediumtext": 12,
    "longtext": 12,
    "binary": -2,
    "varbinary": -3,
    "tinyblob": 2004,
    "blob": 2004,
    "mediumblob": 2004,
    "longblob": 2004,
    "date": 91,
    "time": 92,
    "datetime": 93,
    "timestamp": 2014,
    "year": 4,
    "json": 1111,
    "enum": 1,
    "set": 1,
}


def column_change_json(col: ColumnSpec, table_charset: str | None) -> dict:
    """One column of a ``tableChanges[].table.columns`` entry (Debezium's
    io.debezium.connector.schema.Column)."""
    t = col.type_name
    type_name = t.upper()
    if col.unsigned and t in (
        "tinyint",
        "smallint",
        "mediumint",
        "int",
        "bigint",
        "decimal",
        "numeric",
        "float",
        "double",
        "real",
    ):
        type_name += " UNSIGNED"
    if col.zerofill:
        type_name += " ZEROFILL"
    stringy = t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")
    if t in ("time", "datetime", "timestamp"):
        length = col.fsp or None
    elif t == "enum":
        length = 1
    elif t == "set":
        length = max(0, 2 * len(col.enum_values or ()) - 1)  # the options and their commas
    else:
        length = col.length
    default = col.default
    if default is not None and t == "bit" and default[:2] in ("b'", "B'") and default.endswith("'"):
        default = default[2:-1]  # Debezium's parser keeps the digits of b'101'
    if (
        default is not None
        and t in ("timestamp", "datetime")
        and not col.nullable
        and default.lower().startswith(("current_timestamp", "now", "localtime"))
    ):
        default = "1970-01-01 00:00:00"
    return {
        "name": col.name,
        "jdbcType": _JDBC.get(t, 1111),
        "nativeType": None,
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": (col.charset or table_charset) if stringy else None,
        "length": length,
        "scale": col.scale if t in ("decimal", "numeric", "float", "double", "real") else None,
        "position": col.position,
        "optional": col.nullable,
        "autoIncremented": col.auto_increment,
        "generated": col.auto_increment or col.generated,
        "comment": None,  # include.schema.comments=false (Debezium's default) drops comments
        "defaultValueExpression": default,
        "enumValues": ["'" + v.replace("'", "''") + "'" for v in col.enum_values]
        if t in ("enum", "set") and col.enum_values is not None
        else None,
    }


def _double_quoted(part: str) -> str:
    """Debezium's ``TableId.quote(part, '"')``: embedded double quotes doubled, the whole in
    double quotes; left as it is if it already starts or ends with a double quote."""
    if not part:
        return '""'
    if part[0] == '"' or part[-1] == '"':
        return part
    return '"' + part.replace('"', '""') + '"'


def table_change_json(
    change_type: str, spec: TableSpec | None, db: str | None = None, table: str | None = None
) -> dict:
    """A ``tableChanges`` entry: CREATE/ALTER with the table, DROP with table null."""
    db = db if db is not None else spec.db
    table = table if table is not None else spec.table
    tid = _double_quoted(db) + "." + _double_quoted(table)
    if spec is None or change_type == "DROP":
        return {"type": change_type, "id": tid, "table": None}
    charset = spec.default_charset
    return {
        "type": change_type,
        "id": tid,
        "table": {
            "defaultCharsetName": charset,
            "primaryKeyColumnNames": list(spec.primary_key),
            "columns": [column_change_json(c, charset) for c in spec.columns],
            "comment": None,
        },
    }
