package kafkasow.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The ingest benchmark's Kafka Streams engine: the input topic read as a KTable (last value
 * per key) materialized in a RocksDB store with its changelog topic.
 *
 * <p>Command line and result follow bench/engines/_contract.py: {@code --bootstrap --topic
 * --messages --state-dir --group [--exactly-once] [--keys] [--timeout]}; one JSON line on
 * stdout, logs on stderr. The clock starts when the first input record is stored and stops
 * when the group's committed offsets on the input topic (read with the Admin client, as the
 * orchestrator checks them) cover all N messages. Under exactly_once_v2 those offsets commit
 * in the transaction that holds the changelog records, every commit.interval.ms (100 ms by
 * default) and once more as soon as the last record asks for a commit.
 */
public final class KStreamsIngest {
  private static final String ENGINE = "kafka-streams";
  private static final String STORE = "orders";
  private static final long POLL_COMMITTED_MS = 5;
  private static final ObjectMapper MAPPER = new ObjectMapper();

  /** JSON values as Jackson trees, as the Python engines decode theirs (orjson). */
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

  private static final Object EMIT_LOCK = new Object();
  private static boolean emitted;

  private KStreamsIngest() {}

  /** The contract's command line. */
  private static final class Args {
    String bootstrap;
    String topic;
    long messages = -1;
    String stateDir;
    String group;
    boolean exactlyOnce;
    Long keys;
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
          case "--messages" -> args.messages = Long.parseLong(value);
          case "--state-dir" -> args.stateDir = value;
          case "--group" -> args.group = value;
          case "--keys" -> args.keys = Long.parseLong(value);
          case "--timeout" -> args.timeout = Double.parseDouble(value);
          default -> throw new IllegalArgumentException("unknown option " + name);
        }
      }
      if (args.bootstrap == null || args.topic == null || args.stateDir == null
          || args.group == null || args.messages < 1) {
        throw new IllegalArgumentException(
            "usage: --bootstrap HOST:PORT --topic T --messages N --state-dir DIR --group G"
                + " [--exactly-once] [--keys K] [--timeout S]");
      }
      return args;
    }

    String guarantee() {
      return exactlyOnce ? "exactly-once" : "at-least-once";
    }
  }

  /** Counts the records stored; runs on the single stream thread. */
  private static final class Meter {
    final long target;
    final CountDownLatch reached = new CountDownLatch(1);
    volatile long count;
    volatile long firstNanos;
    volatile long lastNanos;

    Meter(long target) {
      this.target = target;
    }

    /** Count one record; true when it is the last one. */
    boolean tick() {
      long next = count + 1; // one stream thread: no lost updates
      count = next;
      if (next == 1) {
        firstNanos = System.nanoTime();
      }
      if (next == target) {
        lastNanos = System.nanoTime();
        reached.countDown();
        return true;
      }
      return false;
    }
  }

  /**
   * Passes each record on to the table (whose store put runs inside {@code forward}), then
   * counts it; after the last one it asks for a commit, as the Python engines force their
   * final commit, instead of waiting for the next commit interval (30 s at-least-once).
   */
  private static final class CountThenCommit
      implements FixedKeyProcessor<String, JsonNode, JsonNode> {
    private final Meter meter;
    private FixedKeyProcessorContext<String, JsonNode> context;

    CountThenCommit(Meter meter) {
      this.meter = meter;
    }

    @Override
    public void init(FixedKeyProcessorContext<String, JsonNode> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<String, JsonNode> record) {
      context.forward(record);
      if (meter.tick()) {
        context.commit();
      }
    }
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
    startWatchdog(args, version);
    Meter meter = new Meter(args.messages);
    AtomicReference<Throwable> crash = new AtomicReference<>();

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args.topic, Consumed.with(Serdes.String(), JSON))
        .processValues(() -> new CountThenCommit(meter), Named.as("count"))
        .toTable(
            Named.as("last-value"),
            Materialized.<String, JsonNode, KeyValueStore<Bytes, byte[]>>as(STORE)
                .withKeySerde(Serdes.String())
                .withValueSerde(JSON));

    Properties config = new Properties();
    config.put(StreamsConfig.APPLICATION_ID_CONFIG, args.group);
    config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.bootstrap);
    config.put(StreamsConfig.STATE_DIR_CONFIG, args.stateDir);
    config.put(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        args.exactlyOnce ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    config.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    // The same group timeouts as every other engine of the benchmark.
    config.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
    config.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
    config.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

    // Connected before the run, so that watching the commit costs no connection set-up.
    Admin admin = Admin.create(Map.of(
        AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.bootstrap,
        AdminClientConfig.CLIENT_ID_CONFIG, args.group + "-bench-admin"));
    committedTotal(admin, args.group, args.topic);

    KafkaStreams streams = new KafkaStreams(builder.build(), config);
    streams.setUncaughtExceptionHandler(
        exc -> {
          crash.compareAndSet(null, exc);
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    log("starting: application.id " + args.group + ", " + config.get(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG));
    streams.start();

    // Processed: every input record has gone through the topology.
    while (!meter.reached.await(100, TimeUnit.MILLISECONDS)) {
      if (crash.get() != null || !streams.state().isRunningOrRebalancing()) {
        fail(args, version, "the application stopped (" + streams.state() + ") after "
            + meter.count + " of " + args.messages + " records: " + describe(crash.get()));
        streams.close(Duration.ofSeconds(10));
        System.exit(1);
      }
    }
    log("processed " + meter.count + " records; waiting for their offsets to be committed");

    // Committed: the group's offsets on the input topic cover every message.
    long committed;
    long endNanos;
    int polls = 0;
    try (admin) {
      while (true) {
        committed = committedTotal(admin, args.group, args.topic);
        polls++;
        if (committed >= args.messages) {
          endNanos = System.nanoTime();
          break;
        }
        if (crash.get() != null || !streams.state().isRunningOrRebalancing()) {
          fail(args, version, "the application stopped (" + streams.state() + ") with "
              + committed + " offsets committed: " + describe(crash.get()));
          streams.close(Duration.ofSeconds(10));
          System.exit(1);
        }
        Thread.sleep(POLL_COMMITTED_MS);
      }
    }
    double seconds = (endNanos - meter.firstNanos) / 1e9;
    double commitLag = (endNanos - meter.lastNanos) / 1e9;
    log(String.format("committed %d offsets %.3fs after the last record", committed, commitLag));

    long keysInState = countStore(streams);
    long closeStarted = System.nanoTime();
    boolean closed = streams.close(Duration.ofSeconds(30));
    double closeSeconds = (System.nanoTime() - closeStarted) / 1e9;

    Map<String, Object> result = new LinkedHashMap<>();
    result.put("ok", true);
    result.put("engine", ENGINE);
    result.put("version", version);
    result.put("messages", meter.count);
    result.put("seconds", round(seconds, 3));
    result.put("msgs_per_s", round(meter.count / seconds, 1));
    result.put("guarantee", args.guarantee());
    result.put("keys_expected", args.keys);
    result.put("keys_in_state", keysInState);
    result.put("committed_offsets_app", committed);
    result.put("changelog_topic", args.group + "-" + STORE + "-changelog");
    result.put("process_seconds", round((meter.lastNanos - meter.firstNanos) / 1e9, 3));
    result.put("commit_after_last_record_s", round(commitLag, 3));
    result.put("notes", String.format(
        "KStream.processValues(count).toTable(Materialized.as(\"%s\")): RocksDB store, record"
            + " cache (statestore.cache.max.bytes default), changelog topic;"
            + " processing.guarantee=%s, commit.interval.ms=%s, one stream thread; values decoded"
            + " and re-encoded as JSON (Jackson %s); main consumer session.timeout.ms=6000"
            + " heartbeat.interval.ms=500; a commit is requested after the last record; timed to"
            + " the group's committed offsets covering all input (Admin polled every %d ms, %d"
            + " polls); close() after it took %.2fs%s (not counted)",
        STORE, config.get(StreamsConfig.PROCESSING_GUARANTEE_CONFIG),
        new StreamsConfig(config).getLong(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG),
        MAPPER.version(),
        POLL_COMMITTED_MS, polls, closeSeconds, closed ? "" : ", timed out"));
    emit(result);
    System.exit(0);
  }

  /** The sum of the group's committed offsets on the input topic's partitions. */
  private static long committedTotal(Admin admin, String group, String topic) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> offsets =
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(15, TimeUnit.SECONDS);
    long total = 0;
    for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : offsets.entrySet()) {
      if (entry.getKey().topic().equals(topic) && entry.getValue() != null) {
        total += Math.max(entry.getValue().offset(), 0);
      }
    }
    return total;
  }

  /** The number of keys in the store (read through interactive queries, every partition). */
  private static long countStore(KafkaStreams streams) {
    ReadOnlyKeyValueStore<String, JsonNode> store = streams.store(
        StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
    long keys = 0;
    try (KeyValueIterator<String, JsonNode> all = store.all()) {
      while (all.hasNext()) {
        all.next();
        keys++;
      }
    }
    return keys;
  }

  private static void startWatchdog(Args args, String version) {
    Thread watchdog = new Thread(() -> {
      try {
        Thread.sleep((long) (args.timeout * 1000));
      } catch (InterruptedException exc) {
        return;
      }
      fail(args, version, String.format("timed out after %.0fs", args.timeout));
      Runtime.getRuntime().halt(2);
    }, "bench-watchdog");
    watchdog.setDaemon(true);
    watchdog.start();
  }

  private static void fail(Args args, String version, String error) {
    Map<String, Object> result = new LinkedHashMap<>();
    result.put("ok", false);
    result.put("engine", ENGINE);
    result.put("version", version);
    result.put("messages", args.messages);
    result.put("seconds", null);
    result.put("msgs_per_s", null);
    result.put("guarantee", args.guarantee());
    result.put("keys_expected", args.keys);
    result.put("error", error);
    result.put("notes", "");
    emit(result);
  }

  private static String describe(Throwable exc) {
    return exc == null ? "no exception reported" : exc.getClass().getName() + ": " + exc.getMessage();
  }

  private static double round(double value, int digits) {
    double scale = Math.pow(10, digits);
    return Math.round(value * scale) / scale;
  }

  private static void log(String text) {
    System.err.println("[" + ENGINE + "] " + text);
    System.err.flush();
  }

  /** Print the one result line (later calls do nothing). */
  private static void emit(Map<String, Object> result) {
    synchronized (EMIT_LOCK) {
      if (emitted) {
        return;
      }
      emitted = true;
      StringBuilder out = new StringBuilder("{");
      for (Map.Entry<String, Object> entry : result.entrySet()) {
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
