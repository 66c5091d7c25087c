#!/usr/bin/env python3
"""Test data through Confluent's own serialisers (the `confluent-kafka` Python client with
`fastavro`), for the format tests.

    confluent.py produce-avro  BOOTSTRAP REGISTRY TOPIC [--bad]
        Writes orders with AvroSerializer: 20 of schema version 1, 20 of version 2 (which adds
        `channel` with a default), then a record far in the future that moves event time past
        every window. With --bad, also a message without the magic byte (after the 10th) and
        one naming a schema id the registry does not know (after the 30th). Prints one JSON
        object: {"events": [the orders as Tidemark's events should read them, as written],
        "resolved": [the same read with reader.avsc], "bad_offsets": [...], "messages": n},
        and `events_text`/`resolved_text`: the events as compact JSON, fields in order.
    confluent.py consume-avro  BOOTSTRAP REGISTRY TOPIC COUNT
        Reads COUNT messages with AvroDeserializer and prints each value as one JSON line
        (decimals as strings, timestamps as int ms).
    confluent.py produce-protobuf BOOTSTRAP REGISTRY TOPIC
        Writes orders with ProtobufSerializer (the message type built at run time from a
        descriptor: no protoc); prints {"events": [...]} as Tidemark should read them.
    confluent.py schemas DIR
        Writes v1.avsc, v2.avsc, reader.avsc and out.avsc into DIR.
    confluent.py produce-plain-avro BOOTSTRAP TOPIC
        Writes 10 orders as plain Avro values of v1.avsc (fastavro, no wire format); prints
        {"events_text": [...]}.
    confluent.py write-container PATH
        Writes 10 orders of v2.avsc into an Avro object container file (fastavro, deflate);
        prints {"events_text": [...]}.
    confluent.py create-topic BOOTSTRAP TOPIC PARTITIONS
        Creates a topic (on brokers that support CreateTopics; the mock cluster does not).
"""
import datetime
import decimal
import json
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

BASE_MS = 1_700_000_000_000  # a multiple of 10 s

V1_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "status", "type": {"type": "enum", "name": "Status",
                                "symbols": ["OPEN", "PAID", "CANCELLED"]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                "precision": 10, "scale": 2}},
    {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": ["null", "string"], "default": None}]}},
    {"name": "coupon", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attributes", "type": {"type": "map", "values": "long"}},
    {"name": "quantity", "type": "int"},
]
CHANNEL = {"name": "channel", "type": "string", "default": "web"}


def schema(fields):
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": fields}


V1 = schema(V1_FIELDS)
V2 = schema(V1_FIELDS + [CHANNEL])
# Reads every version: drops `tags`, fills `channel`.
READER = schema([f for f in V1_FIELDS if f["name"] != "tags"] + [CHANNEL])
OUT = {"type": "record", "name": "CustomerWindow", "namespace": "shop.out", "fields": [
    {"name": "key", "type": "string"},
    {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "window_end", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "items", "type": "long"},
    {"name": "orders", "type": "long"},
    {"name": "total", "type": "double"},
]}


def order(i, version):
    o = {
        "id": i,
        "customer": "c%d" % (i % 3),
        "status": "OPEN" if i % 4 == 0 else "PAID",
        "amount": decimal.Decimal("%d.%02d" % (i, (i * 25) % 100)),
        "created_at": datetime.datetime.fromtimestamp(
            (BASE_MS + i * 1000) / 1000, tz=datetime.timezone.utc),
        "address": {"city": ["Oslo", "Rome", "Lima"][i % 3],
                    "zip": None if i % 2 else "0%d" % i},
        "coupon": None if i % 3 else "SAVE%d" % i,
        "tags": ["t%d" % k for k in range(i % 3)],
        "attributes": {"b": 2 * i, "a": i},
        "quantity": i % 5 + 1,
    }
    if version == 2:
        o["channel"] = "app" if i % 2 else "web"
    return o


def as_event(o, fields):
    """The order as Tidemark's mapping shows it, fields in the schema's order."""
    out = {}
    for f in fields:
        name = f["name"]
        v = o.get(name, f.get("default"))
        if name == "amount":
            v = str(v)
        elif name == "created_at":
            v = int(v.timestamp() * 1000)
        elif name == "attributes":
            v = dict(sorted(v.items()))
        out[name] = v
    return out


def produce_avro(bootstrap, registry_url, topic, bad):
    registry = SchemaRegistryClient({"url": registry_url})
    serializers = {v: AvroSerializer(registry, json.dumps(s))
                   for v, s in ((1, V1), (2, V2))}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    offsets = []

    def send(value):
        def done(err, msg):
            if err is not None:
                raise SystemExit("delivery failed: %s" % err)
            offsets.append(msg.offset())
        producer.produce(topic, value=value, callback=done)
        producer.flush(30)

    events, resolved, bad_offsets = [], [], []
    for i in range(40):
        version = 1 if i < 20 else 2
        o = order(i, version)
        ctx = SerializationContext(topic, MessageField.VALUE)
        send(serializers[version](o, ctx))
        events.append(as_event(o, (V1 if version == 1 else V2)["fields"]))
        resolved.append(as_event(o, READER["fields"]))
        if bad and i == 10:
            send(b'{"id": 10, "not": "avro"}')
            bad_offsets.append(offsets[-1])
        if bad and i == 20:
            # Schema id 1 (version 1), but the customer string is cut short.
            send(b"\x00\x00\x00\x00\x01\x02\x08ab")
            bad_offsets.append(offsets[-1])
        if bad and i == 30:
            send(b"\x00\x00\x00\x03\xe7\x02\x04")
            bad_offsets.append(offsets[-1])
    # Far in the future: moves event time past every window (and is filtered out).
    far = order(999, 2)
    far["status"] = "CANCELLED"
    far["created_at"] = datetime.datetime.fromtimestamp(
        (BASE_MS + 3_600_000) / 1000, tz=datetime.timezone.utc)
    send(serializers[2](far, SerializationContext(topic, MessageField.VALUE)))
    compact = lambda es: [json.dumps(e, separators=(",", ":")) for e in es]
    print(json.dumps({"events": events, "resolved": resolved, "bad_offsets": bad_offsets,
                      "messages": len(offsets), "events_text": compact(events),
                      "resolved_text": compact(resolved)}))


def plain(value):
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def registry_client(url):
    """A registry client; REGISTRY_AUTH=user:password in the environment adds basic auth."""
    import os
    config = {"url": url}
    if os.environ.get("REGISTRY_AUTH"):
        config["basic.auth.user.info"] = os.environ["REGISTRY_AUTH"]
    return SchemaRegistryClient(config)


def consume_avro(bootstrap, registry_url, topic, count):
    registry = registry_client(registry_url)
    deserializer = AvroDeserializer(registry)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-%f" % time.time(),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.time() + 120
    read = 0
    while read < count and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            continue
        value = deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE))
        print(json.dumps(plain(value)), flush=True)
        read += 1
    consumer.close()
    if read < count:
        raise SystemExit("read %d of %d messages from %s" % (read, count, topic))


PROTO_ORDERS = 12


def produce_protobuf(bootstrap, registry_url, topic):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf import timestamp_pb2
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    pool = descriptor_pool.Default()
    f = descriptor_pb2.FileDescriptorProto()
    f.name = "shop/order.proto"
    f.package = "shop"
    f.syntax = "proto3"
    f.dependency.append("google/protobuf/timestamp.proto")
    T = descriptor_pb2.FieldDescriptorProto
    m = f.message_type.add()
    m.name = "Order"
    status = m.enum_type.add()
    status.name = "Status"
    for n, v in (("OPEN", 0), ("PAID", 1)):
        e = status.value.add()
        e.name, e.number = n, v
    entry = m.nested_type.add()
    entry.name = "AttributesEntry"
    entry.options.map_entry = True
    for n, num, t in (("key", 1, T.TYPE_STRING), ("value", 2, T.TYPE_INT64)):
        fd = entry.field.add()
        fd.name, fd.number, fd.type, fd.label = n, num, t, T.LABEL_OPTIONAL
    oneof = m.oneof_decl.add()
    oneof.name = "payment"

    def field(name, number, type_, label=T.LABEL_OPTIONAL, type_name=None, oneof_index=None):
        fd = m.field.add()
        fd.name, fd.number, fd.type, fd.label = name, number, type_, label
        if type_name:
            fd.type_name = type_name
        if oneof_index is not None:
            fd.oneof_index = oneof_index

    field("id", 1, T.TYPE_INT64)
    field("customer", 2, T.TYPE_STRING)
    field("status", 3, T.TYPE_ENUM, type_name=".shop.Order.Status")
    field("tags", 4, T.TYPE_STRING, label=T.LABEL_REPEATED)
    field("attributes", 5, T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
          type_name=".shop.Order.AttributesEntry")
    field("created_at", 6, T.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    field("card", 7, T.TYPE_STRING, oneof_index=0)
    field("iban", 8, T.TYPE_STRING, oneof_index=0)
    field("amount", 9, T.TYPE_DOUBLE)
    pool.Add(f)
    Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))

    registry = SchemaRegistryClient({"url": registry_url})
    serializer = ProtobufSerializer(Order, registry, {"use.deprecated.format": False})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    events = []
    for i in range(PROTO_ORDERS):
        o = Order()
        o.id = i
        o.customer = "c%d" % (i % 3)
        o.status = i % 2
        o.tags.extend(["t%d" % k for k in range(i % 3)])
        o.attributes["a"] = i
        ts = timestamp_pb2.Timestamp()
        ts.FromMilliseconds(BASE_MS + i * 1000 + 250)
        o.created_at.CopyFrom(ts)
        if i % 2:
            o.card = "card-%d" % i
        else:
            o.iban = "DE%02d" % i
        o.amount = i + 0.5
        value = serializer(o, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value=value)
        event = {"id": i, "customer": "c%d" % (i % 3), "status": ["OPEN", "PAID"][i % 2],
                 "tags": ["t%d" % k for k in range(i % 3)], "attributes": {"a": i},
                 "created_at": BASE_MS + i * 1000 + 250}
        if i % 2:
            event["card"] = "card-%d" % i
        else:
            event["iban"] = "DE%02d" % i
        event["amount"] = i + 0.5
        events.append(event)
    producer.flush(30)
    print(json.dumps({"events": events, "events_text": compact(events)}))


def compact(events):
    return [json.dumps(e, separators=(",", ":")) for e in events]


def produce_plain_avro(bootstrap, topic):
    import io
    import fastavro
    parsed = fastavro.parse_schema(V1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    events = []
    for i in range(10):
        o = order(i, 1)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, o)
        producer.produce(topic, value=buf.getvalue())
        events.append(as_event(o, V1["fields"]))
    producer.flush(30)
    print(json.dumps({"events_text": compact(events)}))


def write_container(path):
    import fastavro
    records = [order(i, 2) for i in range(10)]
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(V2), records, codec="deflate")
    print(json.dumps({"events_text": compact([as_event(o, V2["fields"]) for o in records])}))


def write_schemas(folder):
    for name, s in (("v1", V1), ("v2", V2), ("reader", READER), ("out", OUT)):
        with open("%s/%s.avsc" % (folder, name), "w") as f:
            json.dump(s, f, indent=2)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "produce-avro":
        produce_avro(args[0], args[1], args[2], "--bad" in args)
    elif cmd == "consume-avro":
        consume_avro(args[0], args[1], args[2], int(args[3]))
    elif cmd == "produce-protobuf":
        produce_protobuf(args[0], args[1], args[2])
    elif cmd == "produce-plain-avro":
        produce_plain_avro(args[0], args[1])
    elif cmd == "write-container":
        write_container(args[0])
    elif cmd == "create-topic":
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": args[0]})
        for f in admin.create_topics([NewTopic(args[1], int(args[2]), 1)]).values():
            f.result(30)
    elif cmd == "schemas":
        write_schemas(args[0])
    else:
        raise SystemExit("unknown command %s" % cmd)


if __name__ == "__main__":
    main()
