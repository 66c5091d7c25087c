use super::*;

/// Every type and logical type of the mapping, in one record.
const ALL: &str = r#"{
  "type": "record", "name": "All", "namespace": "t",
  "fields": [
    {"name": "n", "type": "null"},
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"},
    {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "e", "type": {"type": "enum", "name": "Status", "symbols": ["OPEN", "PAID"]}},
    {"name": "a", "type": {"type": "array", "items": "long"}},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "u", "type": ["null", "string"]},
    {"name": "u2", "type": ["null", "string"]},
    {"name": "nested", "type": {"type": "record", "name": "Address",
      "fields": [{"name": "city", "type": "string"}]}},
    {"name": "again", "type": "Address"},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "decneg", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}},
    {"name": "decfixed", "type": {"type": "fixed", "name": "D8", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4}},
    {"name": "uuid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "date", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tus", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "ltms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "time", "type": {"type": "int", "logicalType": "time-millis"}}
  ]
}"#;

const EVENT: &str = r#"{"n":null,"b":true,"i":-5,"l":9007199254740993,"f":1.5,"d":2.25,"s":"héllo","by":"AQL/","fx":"AAECAw==","e":"PAID","a":[1,2],"m":{"a":"x","b":"y"},"u":null,"u2":"set","nested":{"city":"Oslo"},"again":{"city":"Rome"},"dec":"12.30","decneg":"-0.005","decfixed":"123456789.0001","uuid":"550e8400-e29b-41d4-a716-446655440000","date":20000,"tms":1733390000123,"tus":1733390000123,"ltms":5,"time":3600000}"#;

fn event(json: &str) -> Map {
    Value::from_json(json.as_bytes())
        .unwrap()
        .as_map()
        .unwrap()
        .clone()
}

#[test]
fn every_type_reads_back_as_written() {
    let schema = parse_schema(ALL).unwrap();
    let writer = AvroWriter::new(schema.clone()).unwrap();
    let mut bytes = Vec::new();
    writer.write(&event(EVENT), &mut bytes).unwrap();
    let reader = AvroReader::new(schema, None).unwrap();
    let back = reader.read(&bytes).unwrap();
    assert_eq!(Value::from(back).to_string(), EVENT);
    // Bytes after the value are not ignored.
    bytes.push(0);
    assert!(reader
        .read(&bytes)
        .unwrap_err()
        .contains("1 bytes left over"));
    assert!(reader.read(&[0x03]).is_err());
}

#[test]
fn the_crate_decodes_what_the_writer_wrote_with_the_expected_values() {
    // Independent of our reader: the crate's own values of what our writer wrote.
    let schema = parse_schema(ALL).unwrap();
    let mut bytes = Vec::new();
    AvroWriter::new(schema.clone())
        .unwrap()
        .write(&event(EVENT), &mut bytes)
        .unwrap();
    let value = AvroReader::new(schema, None)
        .unwrap()
        .read_value(&bytes)
        .unwrap();
    let Avro::Record(fields) = value else {
        panic!("a record")
    };
    let get = |name: &str| fields.iter().find(|(n, _)| n == name).unwrap().1.clone();
    assert_eq!(get("i"), Avro::Int(-5));
    assert_eq!(get("e"), Avro::Enum(1, "PAID".into()));
    assert_eq!(
        get("u2"),
        Avro::Union(1, Box::new(Avro::String("set".into())))
    );
    assert_eq!(get("tus"), Avro::TimestampMicros(1_733_390_000_123_000));
    assert_eq!(get("by"), Avro::Bytes(vec![1, 2, 255]));
    match get("dec") {
        Avro::Decimal(d) => assert_eq!(BigInt::from(d), BigInt::from(1230)),
        other => panic!("{other:?}"),
    }
    match get("decneg") {
        Avro::Decimal(d) => assert_eq!(BigInt::from(d), BigInt::from(-5)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn decimals_are_exact() {
    let big: BigInt = "123456789012345678901234567890".parse().unwrap();
    assert_eq!(decimal_text(&big, 5), "1234567890123456789012345.67890");
    assert_eq!(decimal_text(&BigInt::from(-5), 3), "-0.005");
    assert_eq!(decimal_text(&BigInt::from(1230), 2), "12.30");
    assert_eq!(decimal_text(&BigInt::from(7), 0), "7");
    assert_eq!(decimal_unscaled("12.3", 2).unwrap(), BigInt::from(1230));
    assert_eq!(decimal_unscaled("-0.005", 3).unwrap(), BigInt::from(-5));
    assert_eq!(decimal_unscaled("4", 2).unwrap(), BigInt::from(400));
    assert!(decimal_unscaled("1.234", 2)
        .unwrap_err()
        .contains("at most 2 digits"));
    assert!(decimal_unscaled("1e3", 2).is_err());
    assert!(decimal_unscaled(".", 2).is_err());
}

#[test]
fn events_that_do_not_fit_name_the_field() {
    let schema = parse_schema(
        r#"{"type":"record","name":"R","fields":[
            {"name":"id","type":"long"},
            {"name":"status","type":{"type":"enum","name":"S","symbols":["A"]}},
            {"name":"opt","type":["null","long"]},
            {"name":"withdefault","type":"string","default":"d"},
            {"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"int"}]}}]}"#,
    )
    .unwrap();
    let w = AvroWriter::new(schema.clone()).unwrap();
    let mut out = b"kept".to_vec();
    let err = |json: &str, out: &mut Vec<u8>| w.write(&event(json), out).unwrap_err();
    assert_eq!(
        err(r#"{"status":"A","inner":{"x":1}}"#, &mut out),
        "field `id`: missing, expected an int (long) (the schema gives no default)"
    );
    assert_eq!(
        err(r#"{"id":"7","status":"A","inner":{"x":1}}"#, &mut out),
        "field `id`: expected an int (long), found string \"7\""
    );
    assert_eq!(
        err(r#"{"id":1,"status":"B","inner":{"x":1}}"#, &mut out),
        "field `status`: expected one of the symbols A, found string \"B\""
    );
    assert_eq!(
        err(
            r#"{"id":1,"status":"A","inner":{"x":3000000000}}"#,
            &mut out
        ),
        "field `inner.x`: expected an int (32-bit), found int 3000000000"
    );
    assert_eq!(
        err(
            r#"{"id":1,"status":"A","opt":"x","inner":{"x":1}}"#,
            &mut out
        ),
        "field `opt`: expected null or an int (long), found string \"x\""
    );
    assert_eq!(out, b"kept", "nothing is written half");
    // Missing: a nullable field is null, a field with a default takes it.
    w.write(&event(r#"{"id":1,"status":"A","inner":{"x":1}}"#), &mut out)
        .unwrap();
    let back = AvroReader::new(schema, None)
        .unwrap()
        .read(&out[4..])
        .unwrap();
    assert_eq!(
        Value::from(back).to_string(),
        r#"{"id":1,"status":"A","opt":null,"withdefault":"d","inner":{"x":1}}"#
    );
}

#[test]
fn decimals_resolve_whatever_their_length() {
    // The crate alone refuses 1.25 (one byte) at precision 10 when it resolves.
    let schema = r#"{"type":"record","name":"D","fields":[
        {"name":"a","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
        {"name":"n","type":["null",{"type":"bytes","logicalType":"decimal","precision":30,"scale":3}]}]}"#;
    let v = parse_schema(schema).unwrap();
    let mut b = Vec::new();
    AvroWriter::new(v.clone())
        .unwrap()
        .write(&event(r#"{"a":"1.25","n":"-0.001"}"#), &mut b)
        .unwrap();
    let r = AvroReader::new(v.clone(), Some(Arc::new(v))).unwrap();
    assert_eq!(
        Value::from(r.read(&b).unwrap()).to_string(),
        r#"{"a":"1.25","n":"-0.001"}"#
    );
}

#[test]
fn a_reader_schema_that_cannot_read_the_writer_is_refused() {
    let writer =
        parse_schema(r#"{"type":"record","name":"O","fields":[{"name":"id","type":"string"}]}"#)
            .unwrap();
    let reader =
        parse_schema(r#"{"type":"record","name":"O","fields":[{"name":"id","type":"long"}]}"#)
            .unwrap();
    let err = AvroReader::new(writer, Some(Arc::new(reader))).unwrap_err();
    assert!(
        err.starts_with("the reader schema cannot read the writer schema"),
        "{err}"
    );
}

#[test]
fn a_reader_schema_resolves_every_version_to_one_shape() {
    let v1 = parse_schema(
        r#"{"type":"record","name":"O","fields":[{"name":"id","type":"long"},{"name":"gone","type":"string"}]}"#,
    )
    .unwrap();
    let v2 = parse_schema(
        r#"{"type":"record","name":"O","fields":[{"name":"id","type":"long"},{"name":"gone","type":"string"},{"name":"region","type":"string","default":"eu"}]}"#,
    )
    .unwrap();
    let reader = Arc::new(
        parse_schema(
            r#"{"type":"record","name":"O","fields":[{"name":"id","type":"long"},{"name":"region","type":"string","default":"none"}]}"#,
        )
        .unwrap(),
    );
    let mut b1 = Vec::new();
    AvroWriter::new(v1.clone())
        .unwrap()
        .write(&event(r#"{"id":1,"gone":"x"}"#), &mut b1)
        .unwrap();
    let mut b2 = Vec::new();
    AvroWriter::new(v2.clone())
        .unwrap()
        .write(&event(r#"{"id":2,"gone":"y","region":"us"}"#), &mut b2)
        .unwrap();
    let r1 = AvroReader::new(v1, Some(reader.clone())).unwrap();
    let r2 = AvroReader::new(v2, Some(reader)).unwrap();
    assert_eq!(
        Value::from(r1.read(&b1).unwrap()).to_string(),
        r#"{"id":1,"region":"none"}"#
    );
    assert_eq!(
        Value::from(r2.read(&b2).unwrap()).to_string(),
        r#"{"id":2,"region":"us"}"#
    );
}

#[test]
fn recursive_types_map() {
    let schema = parse_schema(
        r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"]}]}"#,
    )
    .unwrap();
    let json = r#"{"v":1,"next":{"v":2,"next":null}}"#;
    let mut b = Vec::new();
    AvroWriter::new(schema.clone())
        .unwrap()
        .write(&event(json), &mut b)
        .unwrap();
    let back = AvroReader::new(schema, None).unwrap().read(&b).unwrap();
    assert_eq!(Value::from(back).to_string(), json);
    assert!(parse_schema("{\"type\": \"record\"}").is_err());
}
