package kafkasow.tests;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * A KTable over a SOW topic's upsert topic (docs/upsert-tables.md), as a user's Kafka Streams
 * application builds it: String keys, byte-array values, materialized, exactly-once (so it
 * reads committed records only).
 *
 * <p>Usage: {@code UpsertKTable <bootstrap> <upsert topic> <application id> <state dir>}. It
 * takes the topic's committed end offsets when it starts, runs until the application's
 * committed offsets reach them (then every record below them is in the table), and prints the
 * table to stdout, one line per key: {@code base64(key) TAB base64(value)}, then {@code END n}.
 * Progress goes to stderr. Exit 0, or 1 with the reason on stderr.
 */
public final class UpsertKTable {
  private static final String STORE = "upsert-table";

  private UpsertKTable() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: UpsertKTable <bootstrap> <topic> <application id> <state dir>");
      System.exit(2);
    }
    String bootstrap = args[0];
    String topic = args[1];
    String appId = args[2];
    Properties admin = new Properties();
    admin.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin client = Admin.create(admin)) {
      Map<TopicPartition, Long> ends = endOffsets(client, topic);
      System.err.println("end offsets " + ends);
      StreamsBuilder builder = new StreamsBuilder();
      builder.table(
          topic,
          Consumed.with(Serdes.String(), Serdes.ByteArray()),
          Materialized.<String, byte[], KeyValueStore<Bytes, byte[]>>as(STORE));
      Properties config = new Properties();
      config.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
      config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      config.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
      config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
      config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
      config.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
      config.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
      try (KafkaStreams streams = new KafkaStreams(builder.build(), config)) {
        streams.start();
        waitCommitted(client, appId, ends, streams);
        print(streams);
      }
    } catch (Exception e) {
      System.err.println("UpsertKTable failed: " + e);
      System.exit(1);
    }
  }

  private static Map<TopicPartition, Long> endOffsets(Admin client, String topic)
      throws Exception {
    int partitions =
        client.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
    Map<TopicPartition, OffsetSpec> request = new HashMap<>();
    for (int p = 0; p < partitions; p++) {
      request.put(new TopicPartition(topic, p), OffsetSpec.latest());
    }
    ListOffsetsOptions committed = new ListOffsetsOptions(IsolationLevel.READ_COMMITTED);
    return client.listOffsets(request, committed).all().get().entrySet().stream()
        .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
  }

  private static void waitCommitted(
      Admin client, String appId, Map<TopicPartition, Long> ends, KafkaStreams streams)
      throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(180).toNanos();
    long shown = 0;
    while (true) {
      if (streams.state() == KafkaStreams.State.ERROR
          || streams.state() == KafkaStreams.State.NOT_RUNNING) {
        throw new IllegalStateException("the application stopped: " + streams.state());
      }
      Map<TopicPartition, OffsetAndMetadata> offsets =
          client.listConsumerGroupOffsets(appId).partitionsToOffsetAndMetadata().get();
      boolean reached = true;
      long behind = 0;
      for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
        OffsetAndMetadata at = offsets.get(end.getKey());
        long position = at == null ? 0 : at.offset();
        if (end.getValue() > 0 && position < end.getValue()) {
          reached = false;
          behind += end.getValue() - position;
        }
      }
      if (reached && streams.state() == KafkaStreams.State.RUNNING) {
        return;
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("not caught up in 180s: " + behind + " records behind");
      }
      if (System.nanoTime() - shown > Duration.ofSeconds(2).toNanos()) {
        shown = System.nanoTime();
        System.err.println("state " + streams.state() + ", " + behind + " records behind");
      }
      Thread.sleep(100);
    }
  }

  private static void print(KafkaStreams streams) throws InterruptedException {
    ReadOnlyKeyValueStore<String, byte[]> table = null;
    while (table == null) {
      try {
        table =
            streams.store(
                StoreQueryParameters.fromNameAndType(
                    STORE, QueryableStoreTypes.<String, byte[]>keyValueStore()));
      } catch (org.apache.kafka.streams.errors.InvalidStateStoreException e) {
        Thread.sleep(100); // still rebalancing: the store comes back once it runs
      }
    }
    Base64.Encoder base64 = Base64.getEncoder();
    StringBuilder out = new StringBuilder();
    long count = 0;
    try (KeyValueIterator<String, byte[]> all = table.all()) {
      while (all.hasNext()) {
        KeyValue<String, byte[]> entry = all.next();
        out.append(base64.encodeToString(entry.key.getBytes(StandardCharsets.UTF_8)))
            .append('\t')
            .append(base64.encodeToString(entry.value))
            .append('\n');
        count++;
      }
    }
    out.append("END ").append(count).append('\n');
    System.out.print(out);
    System.out.flush();
  }
}
