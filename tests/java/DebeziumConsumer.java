import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;
import org.apache.kafka.connect.transforms.Transformation;
import org.apache.kafka.connect.transforms.predicates.Predicate;

/**
 * A Kafka Connect sink's view of exported topic records: what a consumer built for Debezium's
 * format receives after its converters and single message transforms.
 *
 * <p>Usage: {@code DebeziumConsumer <records.tsv> <consumer.properties>}. Each input line is
 * {@code topic, partition, offset, key, value, headers} separated by tabs; key and value are
 * base64 ("-" for null), headers are {@code base64(name):base64(value)} joined by commas. The
 * properties are a Connect connector's own lines: {@code key.converter.schemas.enable},
 * {@code value.converter.schemas.enable}, {@code transforms=...}, {@code transforms.<alias>.*},
 * {@code predicates=...}, {@code predicates.<name>.*}. The chain runs as Connect's
 * TransformationChain does: a stage with a predicate applies only where the predicate (xor
 * {@code negate}) holds, and a null result drops the record.
 *
 * <p>Prints one JSON line per input record: {@code outcome} is "record" (with the key and value
 * as JsonConverter writes them without schemas, and the header names), "dropped", or "error"
 * (the exception a Connect task would fail with).
 */
public class DebeziumConsumer {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** One transform with its optional predicate (Connect's TransformationStage). */
    private record Stage(Transformation<SinkRecord> transform, Predicate<SinkRecord> predicate, boolean negate) {
        SinkRecord apply(SinkRecord record) {
            if (predicate == null || negate ^ predicate.test(record)) {
                return transform.apply(record);
            }
            return record;
        }
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (var in = new InputStreamReader(new FileInputStream(args[1]), StandardCharsets.UTF_8)) {
            props.load(in);
        }
        JsonConverter keyConverter = converter(props, "key", true);
        JsonConverter valueConverter = converter(props, "value", false);
        // what the sink hands on, rendered without schemas so the test can read it
        JsonConverter render = new JsonConverter();
        render.configure(Map.of("schemas.enable", "false"), false);
        SimpleHeaderConverter headerConverter = new SimpleHeaderConverter();
        headerConverter.configure(Map.of());
        List<Stage> chain = chain(props);

        for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            String topic = f[0];
            int partition = Integer.parseInt(f[1]);
            long offset = Long.parseLong(f[2]);
            ObjectNode out = JSON.createObjectNode();
            out.put("partition", partition);
            out.put("offset", offset);
            try {
                SchemaAndValue key = keyConverter.toConnectData(topic, bytes(f[3]));
                SchemaAndValue value = valueConverter.toConnectData(topic, bytes(f[4]));
                ConnectHeaders headers = new ConnectHeaders();
                for (String h : f[5].isEmpty() ? new String[0] : f[5].split(",")) {
                    String[] nv = h.split(":", -1);
                    String name = new String(Base64.getDecoder().decode(nv[0]), StandardCharsets.UTF_8);
                    SchemaAndValue hv = headerConverter.toConnectHeader(topic, name, Base64.getDecoder().decode(nv[1]));
                    headers.add(name, hv);
                }
                SinkRecord record = new SinkRecord(
                        topic, partition, key.schema(), key.value(), value.schema(), value.value(), offset, null,
                        null, headers);
                for (Stage stage : chain) {
                    record = stage.apply(record);
                    if (record == null) {
                        break;
                    }
                }
                if (record == null) {
                    out.put("outcome", "dropped");
                } else {
                    out.put("outcome", "record");
                    out.put("topic", record.topic());
                    out.set("key", tree(render, record.topic(), record, true));
                    out.set("value", tree(render, record.topic(), record, false));
                    ArrayNode names = out.putArray("headers");
                    for (Header h : record.headers()) {
                        names.add(h.key());
                    }
                }
            } catch (Exception e) {
                out.put("outcome", "error");
                out.put("error", e.getClass().getName() + ": " + e.getMessage());
            }
            System.out.println(JSON.writeValueAsString(out));
        }
        System.out.flush();
    }

    private static byte[] bytes(String field) {
        return field.equals("-") ? null : Base64.getDecoder().decode(field);
    }

    private static JsonConverter converter(Properties props, String which, boolean isKey) {
        JsonConverter c = new JsonConverter();
        // Kafka Connect's JsonConverter default is schemas.enable=true
        String enabled = props.getProperty(which + ".converter.schemas.enable", "true");
        c.configure(Map.of("schemas.enable", enabled), isKey);
        return c;
    }

    private static com.fasterxml.jackson.databind.JsonNode tree(
            JsonConverter render, String topic, ConnectRecord<?> record, boolean key) throws Exception {
        byte[] b = key
                ? render.fromConnectData(topic, record.keySchema(), record.key())
                : render.fromConnectData(topic, record.valueSchema(), record.value());
        return b == null ? JSON.nullNode() : JSON.readTree(b);
    }

    @SuppressWarnings("unchecked")
    private static List<Stage> chain(Properties props) throws Exception {
        List<Stage> stages = new ArrayList<>();
        for (String alias : names(props.getProperty("transforms", ""))) {
            String prefix = "transforms." + alias + ".";
            Transformation<SinkRecord> t = (Transformation<SinkRecord>) instance(props.getProperty(prefix + "type"));
            t.configure(sub(props, prefix, "type", "predicate", "negate"));
            Predicate<SinkRecord> p = null;
            String predicate = props.getProperty(prefix + "predicate");
            if (predicate != null) {
                String pprefix = "predicates." + predicate + ".";
                p = (Predicate<SinkRecord>) instance(props.getProperty(pprefix + "type"));
                p.configure(sub(props, pprefix, "type"));
            }
            stages.add(new Stage(t, p, Boolean.parseBoolean(props.getProperty(prefix + "negate", "false"))));
        }
        return stages;
    }

    private static List<String> names(String list) {
        List<String> out = new ArrayList<>();
        for (String n : list.split(",")) {
            if (!n.isBlank()) {
                out.add(n.trim());
            }
        }
        return out;
    }

    private static Object instance(String className) throws Exception {
        return Class.forName(className).getDeclaredConstructor().newInstance();
    }

    private static Map<String, Object> sub(Properties props, String prefix, String... skip) {
        Map<String, Object> out = new HashMap<>();
        for (String name : props.stringPropertyNames()) {
            if (name.startsWith(prefix) && !List.of(skip).contains(name.substring(prefix.length()))) {
                out.put(name.substring(prefix.length()), props.getProperty(name));
            }
        }
        return out;
    }
}
