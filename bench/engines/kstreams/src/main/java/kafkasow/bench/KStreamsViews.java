package kafkasow.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The views benchmark's Kafka Streams engine (bench/views.py): the input topic read as a
 * KTable, re-grouped by each record's {@code /grp} and aggregated with an adder and a
 * subtractor, so every update or delete of a record retracts its old contribution from its
 * old group and adds its new one:
 *
 * <pre>
 * builder.table(input)                                  // RocksDB store "positions" + changelog
 *     .groupBy((id, v) -> KeyValue.pair(grp(v), v))     // repartition topic
 *     .aggregate(init, adder, subtractor)               // RocksDB store "totals" + changelog
 *     .toStream().to(output)                            // {"total", "n", "grp"} per group
 * </pre>
 *
 * <p>Command line: {@code --bootstrap HOST:PORT --topic INPUT --output OUTPUT --state-dir DIR
 * --group APP_ID [--exactly-once] [--timeout SECONDS]}. It runs until SIGTERM (the
 * orchestrator decides when the output holds the final state, by reading it) or the timeout.
 * Events go to stdout, one JSON object per line: {@code started}, {@code first_record} (the
 * wall-clock millisecond at which the first input record entered the topology: the
 * timestamp extractor's first call), {@code error}, {@code closed}. Logs go to stderr.
 */
public final class KStreamsViews {
  private static final String ENGINE = "kafka-streams";
  private static final String TABLE_STORE = "positions";
  private static final String AGGREGATE_STORE = "totals";
  private static final ObjectMapper MAPPER = new ObjectMapper();

  /** JSON values as Jackson trees, as the ingest engine decodes them. */
  private static final Serde<JsonNode> JSON = Serdes.serdeFrom(
      (topic, node) -> {
        try {
          return node == null ? null : MAPPER.writeValueAsBytes(node);
        } catch (IOException exc) {
          throw new SerializationException(exc);
        }
      },
      (topic, bytes) -> {
        try {
          return bytes == null ? null : MAPPER.readTree(bytes);
        } catch (IOException exc) {
          throw new SerializationException(exc);
        }
      });

  private KStreamsViews() {}

  /** The command line. */
  private static final class Args {
    String bootstrap;
    String topic;
    String output;
    String stateDir;
    String group;
    boolean exactlyOnce;
    double timeout = 600.0;

    static Args parse(String[] argv) {
      Args args = new Args();
      for (int i = 0; i < argv.length; i++) {
        String name = argv[i];
        if (name.equals("--exactly-once")) {
          args.exactlyOnce = true;
          continue;
        }
        if (i + 1 >= argv.length) {
          throw new IllegalArgumentException(name + " needs a value");
        }
        String value = argv[++i];
        switch (name) {
          case "--bootstrap" -> args.bootstrap = value;
          case "--topic" -> args.topic = value;
          case "--output" -> args.output = value;
          case "--state-dir" -> args.stateDir = value;
          case "--group" -> args.group = value;
          case "--timeout" -> args.timeout = Double.parseDouble(value);
          default -> throw new IllegalArgumentException("unknown option " + name);
        }
      }
      if (args.bootstrap == null || args.topic == null || args.output == null
          || args.stateDir == null || args.group == null) {
        throw new IllegalArgumentException(
            "usage: --bootstrap HOST:PORT --topic T --output O --state-dir DIR --group G"
                + " [--exactly-once] [--timeout S]");
      }
      return args;
    }
  }

  /**
   * The default extractor's answer (the record's own timestamp), noting the wall-clock time
   * of its first call: when the first input record entered the topology.
   */
  private static final class FirstSeen implements TimestampExtractor {
    final AtomicLong firstEpochMs = new AtomicLong(-1);
    final CountDownLatch seen = new CountDownLatch(1);

    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      if (firstEpochMs.get() < 0 && firstEpochMs.compareAndSet(-1, System.currentTimeMillis())) {
        seen.countDown();
      }
      long stamp = record.timestamp();
      return stamp >= 0 ? stamp : Math.max(partitionTime, 0);
    }
  }

  private static ObjectNode totals(long total, long n, String grp) {
    ObjectNode node = MAPPER.createObjectNode();
    node.put("total", total);
    node.put("n", n);
    if (grp != null) {
      node.put("grp", grp);
    }
    return node;
  }

  private static long qty(JsonNode value) {
    return value.path("qty").asLong();
  }

  /** COUNT(/id): a record counts when its /id is present and not null. */
  private static long counted(JsonNode value) {
    return value.hasNonNull("id") ? 1 : 0;
  }

  static Topology topology(Args args, FirstSeen seen) {
    StreamsBuilder builder = new StreamsBuilder();
    builder.table(
            args.topic,
            Consumed.with(Serdes.String(), JSON).withTimestampExtractor(seen),
            Materialized.<String, JsonNode, KeyValueStore<Bytes, byte[]>>as(TABLE_STORE)
                .withKeySerde(Serdes.String())
                .withValueSerde(JSON))
        .groupBy(
            (id, value) -> KeyValue.pair(value.path("grp").asText(), value),
            Grouped.with("by-grp", Serdes.String(), JSON))
        .aggregate(
            () -> totals(0, 0, null),
            (grp, value, agg) -> totals(
                agg.path("total").asLong() + qty(value), agg.path("n").asLong() + counted(value),
                grp),
            (grp, value, agg) -> totals(
                agg.path("total").asLong() - qty(value), agg.path("n").asLong() - counted(value),
                grp),
            Materialized.<String, JsonNode, KeyValueStore<Bytes, byte[]>>as(AGGREGATE_STORE)
                .withKeySerde(Serdes.String())
                .withValueSerde(JSON))
        .toStream()
        .to(args.output, Produced.with(Serdes.String(), JSON));
    return builder.build();
  }

  public static void main(String[] argv) throws Exception {
    System.setProperty(
        "org.slf4j.simpleLogger.defaultLogLevel",
        System.getProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn"));
    Args args;
    try {
      args = Args.parse(argv);
    } catch (IllegalArgumentException exc) {
      System.err.println("[" + ENGINE + "] " + exc.getMessage());
      System.exit(64);
      return;
    }
    String version = AppInfoParser.getVersion();
    FirstSeen seen = new FirstSeen();

    Properties config = new Properties();
    config.put(StreamsConfig.APPLICATION_ID_CONFIG, args.group);
    config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.bootstrap);
    config.put(StreamsConfig.STATE_DIR_CONFIG, args.stateDir);
    config.put(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        args.exactlyOnce ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    config.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    // The same group timeouts as the ingest benchmark's engines.
    config.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
    config.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
    config.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    StreamsConfig resolved = new StreamsConfig(config);

    KafkaStreams streams = new KafkaStreams(topology(args, seen), config);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setUncaughtExceptionHandler(exc -> {
      Map<String, Object> event = new LinkedHashMap<>();
      event.put("event", "error");
      event.put("error", exc.getClass().getName() + ": " + exc.getMessage());
      emit(event);
      stopped.countDown();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      long started = System.nanoTime();
      boolean closed = streams.close(Duration.ofSeconds(30));
      Map<String, Object> event = new LinkedHashMap<>();
      event.put("event", "closed");
      event.put("clean", closed);
      event.put("close_seconds", (System.nanoTime() - started) / 1e9);
      emit(event);
    }, "bench-close"));
    Thread watchdog = new Thread(() -> {
      try {
        Thread.sleep((long) (args.timeout * 1000));
      } catch (InterruptedException exc) {
        return;
      }
      Map<String, Object> event = new LinkedHashMap<>();
      event.put("event", "error");
      event.put("error", String.format("timed out after %.0fs", args.timeout));
      emit(event);
      Runtime.getRuntime().halt(2);
    }, "bench-watchdog");
    watchdog.setDaemon(true);
    watchdog.start();

    streams.start();
    Map<String, Object> started = new LinkedHashMap<>();
    started.put("event", "started");
    started.put("engine", ENGINE);
    started.put("version", version);
    started.put("guarantee", args.exactlyOnce ? "exactly-once" : "at-least-once");
    started.put("processing_guarantee", resolved.getString(StreamsConfig.PROCESSING_GUARANTEE_CONFIG));
    started.put("commit_interval_ms", resolved.getLong(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG));
    started.put("cache_max_bytes", resolved.getLong(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG));
    started.put("stream_threads", resolved.getInt(StreamsConfig.NUM_STREAM_THREADS_CONFIG));
    started.put("jackson", MAPPER.version().toString());
    emit(started);

    // Report the first record from here, not from the stream thread.
    while (!seen.seen.await(100, TimeUnit.MILLISECONDS)) {
      if (stopped.getCount() == 0) {
        break;
      }
    }
    if (seen.firstEpochMs.get() >= 0) {
      Map<String, Object> first = new LinkedHashMap<>();
      first.put("event", "first_record");
      first.put("epoch_ms", seen.firstEpochMs.get());
      emit(first);
    }
    stopped.await();
    System.exit(1);
  }

  private static final Object EMIT_LOCK = new Object();

  /** Print one event line. */
  private static void emit(Map<String, Object> event) {
    synchronized (EMIT_LOCK) {
      StringBuilder out = new StringBuilder("{");
      for (Map.Entry<String, Object> entry : event.entrySet()) {
        if (out.length() > 1) {
          out.append(", ");
        }
        out.append(quote(entry.getKey())).append(": ").append(json(entry.getValue()));
      }
      System.out.println(out.append('}'));
      System.out.flush();
    }
  }

  private static String json(Object value) {
    if (value == null) {
      return "null";
    }
    if (value instanceof Boolean || value instanceof Long || value instanceof Integer) {
      return value.toString();
    }
    if (value instanceof Double number) {
      return number.isNaN() || number.isInfinite() ? "null" : number.toString();
    }
    return quote(value.toString());
  }

  private static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }
}
